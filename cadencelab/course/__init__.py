"""cadencelab.course: the course above the library (notebooks call these; nothing below imports them).

    data      recorded data as DataFrames: the H200 studies, the paper's figures, recorded traces
    frames    the frames the course's figures and panels are drawn from
    panels    interactive panels: clock sliders, the rules panel
    player    the kernel-timeline player (eager beside replay, idle accumulating)
    live      live runs through the adapter's build call: the factorial, one profiled chunk
    display   what the panels share (ipywidgets on demand, a figure into an Output, a readout table)
    tour      run the notebooks headless and write the HTML report, or open them in JupyterLab
"""
