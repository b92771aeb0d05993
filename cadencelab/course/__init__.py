"""cadencelab.course: the course above the library (notebooks call these; nothing below imports them).

    data            recorded data as DataFrames: the H200 studies, the paper's figures, recorded traces
    studies         the one table of bench studies, recorded files and their recording commands
    frames          the frames the course's figures and panels are drawn from
    panels, player  interactive panels (clock sliders, the rules panel); the kernel-timeline player
    live            live runs through the adapter's build call: the factorial, one profiled chunk
    live_cells      the notebooks' live cells, their sizes (LIVE_PRESET) and the GPU memory each needs, measured
    capstone        the capstone's grader (capstone_models: the models a student may pick)
    display         what the panels share (ipywidgets on demand, a figure into an Output, a readout table)
    tour            run the notebooks headless and write the HTML report, or open them in JupyterLab
    kernel          how a notebook is executed: in a new kernel (IPC, its output off the terminal) or a shared one
    sources, lab    where the notebooks are, their percent-format sources; the JupyterLab launcher
    predict         Prediction (a question asked before a reveal), reveal -> DataFrame, reveal_figure
    exercises       graded checkers with diagnostic hints (a package: the machinery, one module per notebook group)
    gradebook       what each check cell records: exercises solved / attempted / blank, predictions scored
    graph_kit       the capture task's side stream and graphs (real on CUDA, a stand-in on a CPU)
    glossary        the course's terms as a DataFrame, and as markdown / HTML
    sample_encoder  notebook 8's streaming encoder, for its declaration exercise
    (not here)      the course's answers: course-solutions/ beside the notebooks, read by path
"""

import sys as _sys

# Inside a notebook kernel, tables show every cell whole and fitted to the page (course.display.frame_html);
# elsewhere (the CLI, scripts) nothing changes and nothing heavy is imported.
if "IPython" in _sys.modules:
    from .display import install_table_format as _install_table_format

    _install_table_format()
