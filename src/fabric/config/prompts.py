"""Fixed texts fabric itself says to the model. Packs own their system prompts."""

NUDGE = (
    "You replied without calling a tool. Continue the task with the tools you have; when it "
    "is done, call finish_task with the final result. Do not answer in plain text."
)

FINISH_INVALID = (
    "finish_task was not accepted: its arguments do not match the required schema.\n"
    "{problems}\nCall finish_task again with corrected arguments."
)

REPEATED = (
    "\n[fabric: you made this same call {times} times in a row and got the same result each "
    "time. Repeating it will not help: read the file again, try a different change, or run "
    "the tests to see what is wrong.]"
)

VERIFY_FAILED = (
    "finish_task was not accepted: the work did not pass verification.\n"
    "{summary}\n{evidence}\n"
    "Fix the problem, check it yourself, then call finish_task again. "
    "Attempts left: {left}."
)

TOOL_SEARCH = (
    "\n\nThis run has more tools than are offered to you. When you need one you do not "
    "have, call search_tools with a few words of what it should do, then load_tools with the "
    "names you want: they are offered to you from your next step on."
)
