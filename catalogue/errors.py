"""The one refusal type every stage derives from: a ValueError with a stable `reason` code.

Each subclass names its `group` of codes in catalogue/vocabulary.yaml (`census`, `fetch`,
`store`, `records`, `settings`, `expr`, `profile`, `layout`, `input`); a reason outside the group is a bug and
raises at once. The message is one line of at most MAX_MESSAGE_CHARS characters, whatever
the input held, so every refusal prints as one line.
"""

from __future__ import annotations

from typing import ClassVar

from speccat.catalogue.vocabulary import REASONS

MAX_MESSAGE_CHARS = 1000


def one_line(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`message` on one line (its lines joined by spaces), cut to `limit` characters."""
    text = " ".join(line.strip() for line in str(message).splitlines() if line.strip())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ReasonError(ValueError):
    """A refusal with a stable `reason` code of its group and a one-line message."""

    group: ClassVar[str]

    def __init__(self, reason: str, message: str):
        allowed = REASONS[self.group]
        if reason not in allowed:
            raise ValueError(f"unknown {type(self).__name__} reason {reason!r}; allowed: {', '.join(allowed)}")
        super().__init__(one_line(message))
        self.reason = reason

    def as_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "message": str(self)}

    def __reduce__(self):  # survive pickling across process pools
        return (type(self), (self.reason, str(self)))


class InputError(ReasonError):
    """A refusal of what a user typed: a flag, a path, a query parameter, a repo id (the
    vocabulary's `input` group). The CLI exits 2 on it."""

    group = "input"
