"""The course: predictions, graded exercises, their solutions and the glossary the notebooks call.

    predict         Prediction (a question asked before a reveal), reveal -> DataFrame, reveal_figure
    exercises       graded checkers with diagnostic hints (one or more per notebook)
    solutions       a correct answer and the planted mistakes of every exercise
    glossary        the course's terms as a DataFrame, and as markdown / HTML
    sample_encoder  notebook 7's streaming encoder, for its declaration exercise
"""

from . import exercises, glossary, predict, sample_encoder, solutions

__all__ = ["exercises", "glossary", "predict", "sample_encoder", "solutions"]
