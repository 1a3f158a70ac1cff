"""Fixed texts fabric itself says to the model. Packs own their system prompts."""

NUDGE = (
    "You replied without calling a tool. Continue the task with the tools you have; when it "
    "is done, call finish_task with the final result. Do not answer in plain text."
)

FINISH_INVALID = (
    "finish_task was not accepted: its arguments do not match the required schema.\n"
    "{problems}\nCall finish_task again with corrected arguments."
)
