"""The model/tool loop of one run, in layers: ``state.py`` (what a run holds, and ``Stop``),
``finish.py`` (a final answer and its checks), ``tools.py`` (one tool call), ``run.py`` (steps,
model calls, cancel). ``execute_task`` drives it."""
