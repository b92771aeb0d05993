"""The one table of the benchmark studies: each study's module and result files, and each recorded
file's exact command on the H200, what to copy afterwards and the device minutes it took.

Data only (it imports nothing from the package), so every layer may read it: the bench CLI lists its
studies from :data:`STUDIES`, the course's loaders name a missing file's command from
:data:`RECORDINGS`, and ``docs/results_table.py`` writes the README's commands table and
``docs/device.md``'s from both.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..adapters.arms import CONTROLS, FACTORIAL

__all__ = ["Study", "Recording", "DeviceTask", "STUDIES", "RECORDINGS", "DEVICE_TASKS", "study", "recording",
           "device_task", "BENCH"]

#: how every study is started
BENCH = "python -m cadencelab.bench"


@dataclass(frozen=True)
class Study:
    """One bench study: ``python -m cadencelab.bench NAME``, defined in ``cadencelab.bench.<module>``
    (its ``add_parser``), writing ``results`` under ``--out``."""

    name: str
    module: str
    results: tuple[str, ...]


@dataclass(frozen=True)
class Recording:
    """A file under ``data/`` recorded by a study: ``flags`` are exactly the flags it was run with (``--out``
    aside), ``then`` what to do with ``DIR`` afterwards (``{path}``: the file), ``machine`` where it ran,
    ``minutes`` the device minutes it took (None: an older recording, not re-run), ``label`` its row in
    the device doc and ``out`` the folder name under ``$OUT`` there."""

    dataset: str
    study: str
    path: str
    flags: str
    then: str
    label: str = ""
    minutes: float | None = None
    out: str = ""
    machine: str = "on a CUDA machine"

    def command(self, out: str = "DIR") -> str:
        """The command line that records it, writing under ``out``."""
        flags = f" {self.flags}" if self.flags else ""
        return f"{BENCH} {self.study}{flags} --out {out}"

    def how(self) -> str:
        """The command and what to do afterwards, as a missing file's error names them."""
        return f"{self.command()}  ({self.machine}), then {self.then.format(path=f'data/{self.path}')}"


@dataclass(frozen=True)
class DeviceTask:
    """A device command that is not a study (the CUDA tests, the live course)."""

    label: str
    command: str
    minutes: float | None  # None: not run yet
    note: str = ""
    last: bool = False  # listed after the studies
    dataset: str = ""  # the recorded file it leaves under data/, if any (course.data.DATASETS)
    path: str = ""  # that file, relative to data/
    then: str = ""  # what to copy there afterwards

    def how(self) -> str:
        """The command and what to do afterwards, as a missing file's error names them."""
        return f"{self.command}  (on a CUDA machine), then {self.then}"


STUDIES = (
    Study("token2wav", "token2wav", ("token2wav_factorial.json", "token2wav_factorial_blocks.csv",
                                     "token2wav_factorial_chunks.csv", "trace_<arm>.json.gz")),
    Study("conditions", "conditions", ("device_conditions.json", "device_conditions_chunks.csv")),
    Study("duplex", "duplex", ("duplex_second.json", "duplex_second_rows.csv", "trace_duplex_<arm>.json.gz")),
    Study("soak", "soak", ("soak.json", "soak_chunks.csv", "rows_<arm>_<shard>.jsonl")),
    Study("crossarch", "crossarch", ("moshi_mimi.json", "moshi_mimi_frames.csv", "freeze_style.json",
                                     "freeze_style_chunks.csv")),
    Study("sessions", "sessions", ("sessions.json", "sessions.csv", "sessions_chunks.csv", "runs_<arm>.jsonl")),
    Study("kit", "kit", ("kit_factorial.json", "kit_factorial_blocks.csv")),
    Study("host", "host", ("host_survey.json", "host_survey.csv")),
    Study("lanes-limiter", "lanes_limiter", ("lanes_limiter.json", "lanes_limiter_chunks.csv",
                                             "lanes_limiter_launches.csv", "lanes_limiter_streams.csv")),
)

#: the older recordings' arms (one process per arm then)
_FACTORIAL_ARMS = ",".join((*FACTORIAL, *CONTROLS[:3]))  # the table's arms, less the compile control
_FACTORIAL_THEN = "copy DIR/token2wav_factorial.json to {path}"
_DUPLEX = "--device cuda --preset h200 --arms B0,SRc --seconds 8 --trace-cpu-depth 3"
_DUPLEX_THEN = "copy DIR/duplex_second.json to {path}"
_SESSIONS_SWEEP = ("--device cuda --arms B0,SRc,SRl,SRb --arrivals aligned,staggered --sessions 1,16 --resolution 0.25 "
                   "--arm-reserve 60 --verify-workers 4 --time-budget 465")
_SESSIONS_THEN = "copy DIR/sessions.json to {path} and gzip DIR/sessions.csv and DIR/sessions_chunks.csv beside it"
#: the device condition of the older pinned recordings (before the exact one was chosen)
_OLDER = "--condition no_tf32_cudnn_det_ws"
#: where the 2026-12-06 recordings ran (a lent H100; transformers 5.25 carried for the transformers adapters)
_H100 = "on an H100 (a lent CUDA machine)"
_H100_HF = "on an H100, transformers 5.25 installed"
_H200 = "on an H200 (a lent CUDA machine)"

def _h100_sessions(name: str, arms: str, sessions: str, budget: int, label: str, minutes: float, out: str,
                   resolution: float = 0.125, growth: float = 1.5) -> Recording:
    """A speak-heavy, aligned sessions sweep on the H100 (``arms``: the arms and their own flags), saved as ``name``."""
    return Recording(name, "sessions", f"h100/{name}.json",
                     f"--device cuda --arms {arms} --workloads speak_heavy --arrivals aligned --sessions {sessions} "
                     f"--growth {growth} --resolution {resolution} --arm-reserve 45 --verify-workers 4 "
                     f"--time-budget {budget}",
                     _SESSIONS_THEN + f" as {name}.csv.gz and {name}_chunks.csv.gz", label, minutes, out, _H100)


def _h100_duplex_processes(stem: str, args: str, label: str, out: str) -> tuple[Recording, ...]:
    """One duplex command run in 3 fresh processes (one process is one sample), saved as ``stem`` 1 to 3."""
    return tuple(Recording(f"{stem}{k}", "duplex", f"h100/{stem}{k}.json", f"--device cuda --preset h200 {args}",
                           _DUPLEX_THEN, f"{label} (one fresh process; run 3 times)", 0.5, out, _H100_HF)
                 for k in (1, 2, 3))


RECORDINGS = (
    Recording("device_conditions", "conditions", "h200/device_conditions.json", "--device cuda",
              "copy DIR/device_conditions.json to {path} and gzip DIR/device_conditions_chunks.csv beside it",
              "device conditions", 4.5, "conditions"),
    Recording("factorial", "token2wav", "h200/token2wav_factorial.json",
              "--device cuda --arms B0,S,R,Rc,SR,SRc,B0_repeat,vendor_graph_50,B0@defaults --time-budget 440",
              _FACTORIAL_THEN + " and DIR/token2wav_factorial_blocks.csv and _chunks.csv beside it",
              "factorial (exact condition; 3 fresh processes per arm)", 8.8, "token2wav"),
    # which cores run host-bound work fast and steadily: the headline pins to the fastest three it found
    Recording("host", "host", "h200/host_survey.json", "--device cuda --rounds 4 --pause 0.5",
              "copy DIR/host_survey.json to {path} and gzip DIR/host_survey.csv beside it",
              "host survey (the cores the headline pins to)", 0.3, "host"),
    # the headline and the A/A check alone, with as many fresh processes as the budget allows, pinned to the
    # host survey's three fastest cores, the next round staging on the others
    Recording("headline", "token2wav", "h200/token2wav_headline.json",
              "--device cuda --arms B0,SRc,B0_repeat --no-profile --max-processes 40 --time-budget 520 --cores 4,6,10",
              "copy DIR/token2wav_factorial.json to {path}, DIR/token2wav_factorial_blocks.csv beside it as "
              "token2wav_headline_blocks.csv, and gzip DIR/token2wav_factorial_chunks.csv beside it as "
              "token2wav_headline_chunks.csv.gz", "headline: SRc vs B0 and the A/A check (fresh processes until the "
              "budget)", 8.4, "headline"),
    # one factorial block after the rule arms moved onto the adapter kit: exactness and rough speed of that path
    Recording("factorial_on_kit", "token2wav", "h200/token2wav_block_on_kit.json",
              "--device cuda --arms B0,S,R,Rc,SR,SRc,B0_repeat --min-processes 1 --max-processes 1 --no-profile "
              "--time-budget 230", "copy DIR/token2wav_factorial.json to {path} and gzip DIR/token2wav_factorial_blocks"
              ".csv and _chunks.csv beside it as token2wav_block_on_kit_blocks.csv.gz and _chunks.csv.gz",
              "one factorial block after the rule arms moved onto the kit (1 fresh process per arm)", 1.9, "block"),
    # the kit's own factorial (bench kit) on Token2wav as one whole-call operator: certificate, arms, intervals
    Recording("kit_token2wav", "kit", "h200/kit_token2wav.json",
              "--model token2wav --device cuda --min-processes 3 --max-processes 3 --time-budget 480",
              "copy DIR/kit_factorial.json to {path} and gzip DIR/kit_factorial_blocks.csv beside it as "
              "kit_token2wav_blocks.csv.gz", "the kit's factorial on Token2wav (B0, S, R, Rc, SR, SRc and the A/A arm; "
              "3 fresh processes each)", 6.0, "kit"),
    # older recordings (earlier commits, named in their provenance), kept because the course compares them
    Recording("factorial_pinned", "token2wav", "h200/token2wav_factorial_pinned_ws.json",
              f"--device cuda --arms {_FACTORIAL_ARMS} {_OLDER}", _FACTORIAL_THEN),
    Recording("factorial_unpinned", "token2wav", "h200/token2wav_factorial_unpinned.json",
              "--device cuda --arms B0,S,R,Rc,SR,SRc,vendor_graph,vendor_graph_50 --condition no_tf32",
              _FACTORIAL_THEN),
    Recording("duplex_second", "duplex", "h200/duplex_second.json", _DUPLEX, _DUPLEX_THEN, "duplex second", 1.5,
              "duplex"),
    Recording("duplex_served", "duplex", "h200/duplex_second_served.json", f"{_DUPLEX} --decode eager,graph",
              _DUPLEX_THEN, "duplex second, language models also served (static cache + graph decode)", 1.7,
              "served"),
    Recording("duplex_second_pinned", "duplex", "h200/duplex_second_pinned_ws.json",
              f"{_DUPLEX} {_OLDER}", _DUPLEX_THEN),
    Recording("duplex_second_unpinned", "duplex", "h200/duplex_second_unpinned.json", f"{_DUPLEX} --condition no_tf32",
              _DUPLEX_THEN),
    # one GPU: the B0 reference runs after the arm, as 4 processes sharing it
    Recording("soak", "soak", "h200/soak.json",
              "--chunks 1800 --turn-every 30 --device cuda:0 --b0-devices cuda:0 --b0-workers 4 --no-concurrent "
              "--timeout 400", "copy DIR/soak.json to {path} and gzip DIR/soak_chunks.csv beside it",
              "soak (one GPU)", 5.7, "soak"),
    # one run serves both arrival modes (one set-up per arm), every arm swept past its break point
    Recording("sessions", "sessions", "h200/sessions.json",
              _SESSIONS_SWEEP, _SESSIONS_THEN + ", the same for DIR/sessions_staggered.json and its CSVs, and the lanes "
              "trace (trace_SRl_lanes.json.gz)",
              "sessions, aligned and staggered arrivals (B0, SRc, lanes SRl, experimental SRb; to the break point)", 8.0,
              "sessions"),
    Recording("sessions_srb_mixed", "sessions", "h200/sessions_srb_mixed.json",
              "--device cuda --arms SRb --workloads mixed --sessions 64,96,112,128 --time-budget 130",
              _SESSIONS_THEN, "sessions, SRb follow-up (mixed past N = 64)", 1.3, "srb"),
    Recording("sessions_staggered", "sessions", "h200/sessions_staggered.json", _SESSIONS_SWEEP,
              "written by the sessions command above (DIR/sessions_staggered.json to {path}, its CSVs gzipped beside it)",
              "sessions, staggered arrivals (the same run)", None, "sessions"),
    Recording("sessions_srb_staggered", "sessions", "h200/sessions_srb_staggered.json",
              "--device cuda --arms SRb --stagger --workloads speak_heavy --sessions 16,32,48 --time-budget 85",
              _SESSIONS_THEN, "sessions, SRb staggered follow-up", 1.3, "srbst"),
    Recording("mimi", "crossarch", "h200/moshi_mimi.json", "--device cuda",
              "copy DIR/moshi_mimi.json to {path} and gzip its frames CSV beside it",
              "cross-architecture (needs moshi==0.2.13)", 1, "crossarch", "on a CUDA machine, moshi installed"),
    Recording("freeze", "crossarch", "h200/freeze_style.json", "--device cuda",
              "copy DIR/freeze_style.json to {path} and gzip its chunks CSV beside it"),
    # an H100 (2026-12-06, the one spec): a block of the rule arms, the transformers adapters, the lanes
    Recording("factorial_spec", "token2wav", "h100/token2wav_block_spec.json",
              "--device cuda --arms B0,S,R,Rc,SR,SRc,B0_repeat --min-processes 1 --max-processes 1 --no-profile "
              "--time-budget 105", "copy DIR/token2wav_factorial.json to {path} and gzip DIR/token2wav_factorial_blocks"
              ".csv and _chunks.csv beside it as token2wav_block_spec_blocks.csv.gz and _chunks.csv.gz",
              "one factorial block on the one spec (1 fresh process per arm)", 1.9, "block", _H100),
    *(Recording(f"kit_hf_{m}", "kit", f"h100/kit_hf_{m}.json",
                f"--model cadencelab.adapters.hf.{m}:kit_model_on --device cuda --arms {arms} --min-processes 3 "
                f"--max-processes 3 --time-budget {budget} --block-timeout {block}",
                f"copy DIR/kit_factorial.json to {{path}} and gzip DIR/kit_factorial_blocks.csv beside it as "
                f"kit_hf_{m}_blocks.csv.gz", f"the kit's factorial on transformers' {what} (3 fresh processes per arm)",
                minutes, m, _H100_HF)
      for m, what, arms, budget, block, minutes in (
          ("qwen2_decode", "Qwen2 decoder", "B0,S,R,Rc,SR,SRc,B0_repeat", 100, 60, 1.2),
          ("mimi_encoder", "Mimi encoder", "B0,SRc,B0_repeat", 60, 40, 1.1),
          ("mimi_decoder", "Mimi decoder", "B0,SRc,B0_repeat", 60, 40, 1.1))),
    Recording("lanes_limiter", "lanes-limiter", "h100/lanes_limiter.json",
              "--device cuda --sessions 28,32 --lanes 16 --speak-seconds 2 --profile-sessions 28",
              "copy DIR/lanes_limiter.json to {path} and gzip its chunks, launches and streams CSVs beside it",
              "what limits the lanes (host split per chunk, graph launches, one profiled second)", 1.4, "limiter",
              _H100),
    _h100_sessions("sessions_lane_processes", "B0,SRc,SRl --lane-processes 2 --lanes 16", "4,16,28", 230,
                   "sessions, lanes served from 2 processes sharing the GPU (speak-heavy)", 3.0, "sessions"),
    _h100_sessions("sessions_srbi", "B0,SRb,SRbi", "4,16,32", 250,
                   "sessions, batched SRb beside batch-invariant SRbi (experimental, speak-heavy)", 3.3, "sbi"),
    # a lent H100 again (2026-12-07): the compile control, the fused decode, the lanes under MPS
    Recording("kit_hf_qwen2_decode_compiled", "kit", "h100/kit_hf_qwen2_decode_compiled.json",
              "--model cadencelab.adapters.hf.qwen2_decode:kit_model_on --device cuda --arms "
              "B0,S,R,Rc,SR,SRc,B0_repeat,B0_compiled --min-processes 3 --max-processes 3 --time-budget 110 "
              "--block-timeout 70", "copy DIR/kit_factorial.json to {path} and gzip DIR/kit_factorial_blocks.csv "
              "beside it as kit_hf_qwen2_decode_compiled_blocks.csv.gz",
              "the kit's factorial on transformers' Qwen2 decoder with the compile control (3 fresh processes per "
              "arm)", 1.6, "qwen2", _H100_HF),
    Recording("duplex_fused", "duplex", "h100/duplex_second_fused.json",
              "--device cuda --preset h200 --arms B0,SRc --decode eager,graph,fused --seconds 5",
              _DUPLEX_THEN + " and gzip DIR/duplex_second_rows.csv beside it as duplex_second_fused_rows.csv.gz",
              "duplex second, language models served by the graph and the fused decode", 1.4, "fused", _H100_HF),
    _h100_sessions("sessions_mps", "B0,SRc,SRl --lane-processes 4 --lanes 32 --mps", "4,16,32", 230,
                   "sessions, lanes served from 4 processes as clients of one MPS daemon (speak-heavy)", 3.4,
                   "sessions"),
    # a second lent H100 the same day: the MPS sweep through the 2.5x count twice, a lane-count control, the
    # fused second in three fresh processes, the Mimi encoder's compile control
    *(_h100_sessions(f"sessions_mps_{run}", "B0,SRc,SRl --lane-processes 4 --lanes 32 --mps", "4,16,32,38", 330,
                     "sessions under MPS through the 2.5x count (speak-heavy; run twice for a spread)", m, "sessions",
                     resolution=0.05) for run, m in (("r2", 3.7), ("r3", 4.0))),
    _h100_sessions("sessions_mps_40lanes", "SRc,SRl --lane-processes 4 --lanes 40 --mps", "4,16,32,38,40", 260,
                   "sessions under MPS with 40 lanes: a lane-count control (no B0 arm, so no chunk checked)", 2.6,
                   "sessions", resolution=0.05),
    *_h100_duplex_processes("duplex_fused_p", "--arms SRc --decode graph,fused --seconds 7 --no-profile",
                            "duplex second, graph and fused decode", "fused"),
    Recording("kit_hf_mimi_encoder_compiled", "kit", "h100/kit_hf_mimi_encoder_compiled.json",
              "--model cadencelab.adapters.hf.mimi_encoder:kit_model_on --device cuda --arms "
              "B0,SRc,B0_repeat,B0_compiled --min-processes 3 --max-processes 3 --time-budget 200 --block-timeout 50",
              "copy DIR/kit_factorial.json to {path} and gzip DIR/kit_factorial_blocks.csv beside it as "
              "kit_hf_mimi_encoder_compiled_blocks.csv.gz",
              "the kit's factorial on the Mimi encoder with the compile control (3 fresh processes per arm)", 3.8,
              "mimi_encoder", _H100_HF),
    # the same lent H100, its last minutes: what limits the lanes under MPS, and the two-second warm-up
    Recording("lanes_limiter_mps4", "lanes-limiter", "h100/lanes_limiter_mps4.json",
              "--device cuda --lane-processes 4 --mps --lanes 32 --sessions 38 --speak-seconds 2 --profile-sessions 38",
              "copy DIR/lanes_limiter.json to {path} and gzip DIR/lanes_limiter_chunks.csv beside it as "
              "lanes_limiter_mps4_chunks.csv.gz", "what limits the lanes under MPS: 4 processes of 8 lanes, every "
              "process's kernels profiled at 38 sessions", 1.4, "limiter", _H100),
    Recording("lanes_limiter_mps8", "lanes-limiter", "h100/lanes_limiter_mps8.json",
              "--device cuda --lane-processes 8 --mps --lanes 32 --sessions 38 --speak-seconds 2 --no-profile",
              "copy DIR/lanes_limiter.json to {path}", "the same 32 lanes from 8 processes of 4 at 38 sessions "
              "(unprofiled)", 1.5, "limiter8", _H100),
    Recording("duplex_fused_warmup2", "duplex", "h100/duplex_fused_warmup2.json",
              "--device cuda --preset h200 --arms SRc --decode fused --seconds 8 --warmup-seconds 2 --no-profile",
              _DUPLEX_THEN, "duplex second, fused decode, two warm-up seconds (the first continuation before the "
              "clock)", 0.4, "fused_w2", _H100_HF),
    # a third lent H100 that day: the two-second warm-up in three fresh processes, the Mimi decoder's control
    *_h100_duplex_processes("duplex_fused_w2_p", "--arms SRc --decode graph,fused --seconds 8 --warmup-seconds 2 "
                            "--no-profile", "duplex second, graph and fused decode after two warm-up seconds",
                            "fused_w2"),
    Recording("kit_hf_mimi_decoder_compiled", "kit", "h100/kit_hf_mimi_decoder_compiled.json",
              "--model cadencelab.adapters.hf.mimi_decoder:kit_model_on --device cuda --arms "
              "B0,SRc,B0_repeat,B0_compiled --min-processes 3 --max-processes 3 --time-budget 200 --block-timeout 50",
              "copy DIR/kit_factorial.json to {path} and gzip DIR/kit_factorial_blocks.csv beside it as "
              "kit_hf_mimi_decoder_compiled_blocks.csv.gz",
              "the kit's factorial on the Mimi decoder with the compile control (3 fresh processes per arm)", 3.6,
              "mimi_decoder", _H100_HF),
    # a lent H200 that afternoon (448fe2f): the interpreter-lock probe from 4 and 8 lane processes, the sweep from 8
    *(Recording(f"lanes_limiter_lock{p}", "lanes-limiter", f"h200/lanes_limiter_lock{p}.json",
                f"--device cuda --lane-processes {p} --mps --lanes {lanes} --sessions 16,38 --speak-seconds 2 "
                f"--no-profile", f"copy DIR/lanes_limiter.json to {{path}} and gzip DIR/lanes_limiter_chunks.csv "
                f"beside it as lanes_limiter_lock{p}_chunks.csv.gz",
                f"the interpreter-lock probe in {p} lane processes of {lanes // p} lanes (unprofiled)", m, f"lock{p}",
                _H200) for p, m, lanes in ((4, 1.6, 32), (8, 1.7, 32))),
    Recording("sessions_mps8", "sessions", "h200/sessions_mps8.json",
              "--device cuda --arms B0,SRc,SRl --lane-processes 8 --lanes 32 --mps --workloads speak_heavy --arrivals "
              "aligned --sessions 4,16,38 --growth 1.15 --resolution 0.05 --arm-reserve 40 --verify-workers 4 "
              "--time-budget 230", _SESSIONS_THEN + " as sessions_mps8.csv.gz and sessions_mps8_chunks.csv.gz",
              "sessions under MPS from 8 processes of 4 lanes (speak-heavy)", 4.0, "sessions8", _H200),
)

DEVICE_TASKS = (
    DeviceTask("CUDA tests", "python3 -m pytest -q -m cuda tests", 4.8,
               "75 passed, 3 failed at aeaaec1 on an H100, 2026-12-06 (data/h100/logs/cuda_tests.log: the "
               "batch-invariant SRbi rows at B = 2, 4 and one planted capture mistake); on 2026-12-07 the tests of "
               "those two and of the compile control passed there (data/h100/logs/2026-12-07_cuda_tests_ws.log); "
               "the whole suite, 81 passed at 47f616c on an H100 later that day "
               "(data/h100/logs/2026-12-07_cuda_suite.log); at e28944a on a third H100, with the marked tests of the "
               "lane processes' profile and the warm-up seconds, 83 passed, the four notebook and widget modules "
               "skipped there without their wheels (data/h100/logs/2026-12-07_cuda_suite_e28944a.log); at 448fe2f on "
               "a lent H200, the lane processes' tests (staged set-up, memory readings; tests/test_lanes_limiter.py) "
               "2 passed (data/h200/logs/2026-12-07_cuda_lanes.log)"),
    DeviceTask("the raw CUDA-graph lesson (notebook 4)", "python -m cadencelab.course.graph_lesson --out $OUT/lesson",
               0.1, "2026-12-01", dataset="graph_lesson", path="h200/graph_lesson.json",
               then="copy $OUT/lesson/graph_lesson.json to data/h200/"),
    DeviceTask("the live cells' GPU memory (the README's running-live guide)",
               "python -m cadencelab.course.live_cells --memory --out $OUT/memory", 4.5, "2026-12-02",
               dataset="live_memory", path="h200/live_memory.json",
               then="copy live_memory.json and live_memory.csv from $OUT/memory to data/h200/"),
    # its minutes and notebooks (docs/device.md) are read from the recording, data/h200/tour/
    DeviceTask("the course, live", "python -m cadencelab.cli tour $OUT/tour", None, "", last=True, dataset="tour_live", path="h200/tour/summary.json",
               then="copy summary.json and tour.json from $OUT/tour to data/h200/tour/"),
    # the notebooks whose exercises are graded on the GPU (speed and exactness), on a short call
    DeviceTask("the GPU-graded notebooks, live", "python -m cadencelab.cli tour $OUT/tour --only 9,10", 0.5,
               "2026-12-07, an H100", last=True, dataset="tour_graded", path="h100/tour_graded/summary.json",
               then="copy summary.json, tour.json and gradebook.json from $OUT/tour to data/h100/tour_graded/"),
)


def study(name: str) -> Study:
    """The study named ``name`` (KeyError lists the known ones)."""
    for s in STUDIES:
        if s.name == name:
            return s
    raise KeyError(f"no study {name!r}; studies: {', '.join(s.name for s in STUDIES)}")


def device_task(dataset: str) -> DeviceTask:
    """The device task that records ``dataset`` (KeyError lists the known ones)."""
    for t in DEVICE_TASKS:
        if t.dataset and t.dataset == dataset:
            return t
    raise KeyError(f"no device task records {dataset!r}; they record: "
                   f"{', '.join(t.dataset for t in DEVICE_TASKS if t.dataset)}")


def recording(dataset: str) -> Recording:
    """The recording of ``dataset`` (KeyError lists the known ones)."""
    for r in RECORDINGS:
        if r.dataset == dataset:
            return r
    raise KeyError(f"no recorded dataset {dataset!r}; datasets: {', '.join(r.dataset for r in RECORDINGS)}")
