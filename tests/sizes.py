"""The smallest honest sizes the CPU tests run the Token2wav teaching config at: one source for every test.

CPU_STEPS: solver steps. Every step runs the same code (a loop over the steps, each step's cache at its own
slot), so 3 steps (more than one slot, a middle and a last step) cover what the declared 10 do at a third of the
flow's cost. The declared steps run in the CUDA tests and, on a CPU, in CI's bench smoke (B0 vs SRc,
.ci/run), outside pytest.

PROMPT_TOKENS: a short speaker prompt (its frames: twice as many) where a test's subject is not the prompt.
"""

CPU_STEPS = 3
PROMPT_TOKENS = 26
