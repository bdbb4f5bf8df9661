"""How an adapter applies its table of SDK exceptions to a block: `with translated(self._translate): ...`.

One SDK class mapped in one place stays a plain `except X as exc: raise TransientError(...) from exc`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kimik3_reconciler.errors import Kimik3Error

# What an SDK exception means for kimik3; None for one it does not know (ours, a bug): that one passes unchanged.
Translate = Callable[[Exception], Kimik3Error | None]


@contextmanager
def translated(translate: Translate, *, hide_cause: bool = False) -> Iterator[None]:
    """Raise `translate(exc)` in place of an exception from the block; exceptions it does not know pass unchanged.

    The SDK exception stays the cause (`docker.errors.NotFound` tells "absent" from "refused"), unless
    `hide_cause`: for an SDK whose exceptions carry a secret (the api key in openai's request).
    """
    try:
        yield
    except Exception as exc:
        error = translate(exc)
        if error is None:
            raise
        if hide_cause:
            raise error from None
        raise error from exc
