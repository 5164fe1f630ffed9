"""The refusal type shared by the catalogue's loaders and pricing: a ValueError with a `reason`."""

from __future__ import annotations


class ReasonError(ValueError):
    """A refusal with a stable `reason` code and a message naming what was refused and why."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason

    def as_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "message": str(self)}

    def __reduce__(self):  # survive pickling across process pools
        return (type(self), (self.reason, str(self)))
