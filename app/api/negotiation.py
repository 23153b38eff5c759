"""Content negotiation for the routes that answer one media type other than JSON (RFC 9110, 12.5.1).

A route that can answer only ``media_type`` refuses a request whose ``Accept`` admits it by no media
range: 406 ``NOT_ACCEPTABLE``, in the error envelope (which is JSON whatever ``Accept`` says, as every
error). What admits it: no ``Accept`` at all (or a blank one: a client that states no preference), the
type itself, ``<type>/*`` or ``*/*``. The most specific range that matches decides, so
``*/*, application/vnd.queuecore.records;q=0`` refuses it, as RFC 9110 says ``q=0`` means "not
acceptable". Media-type parameters other than ``q`` are not compared (the types answered here take none);
an element that is not ``type/subtype``, or whose ``q`` is not a number from 0 to 1, admits nothing.
"""

from __future__ import annotations

from fastapi import Request

from app.errors import ApiError

# How specific a matching range is: the type itself, ``<type>/*``, ``*/*``.
_EXACT, _TYPE_WILDCARD, _ANY = 3, 2, 1


def admits(accept: str | None, media_type: str) -> bool:
    """Whether an ``Accept`` field value admits ``media_type`` (``None``: the header was not sent)."""
    if accept is None or not accept.strip():
        return True
    kind, _, subtype = media_type.lower().partition("/")
    best: tuple[int, float] | None = None  # (specificity, q) of the most specific matching range
    for element in accept.split(","):
        media_range, *params = element.split(";")
        range_kind, slash, range_subtype = media_range.strip().lower().partition("/")
        if not slash:
            continue  # empty list elements are allowed (RFC 9110 5.6.1); anything else here is malformed
        if (range_kind, range_subtype) == (kind, subtype):
            specificity = _EXACT
        elif (range_kind, range_subtype) == (kind, "*"):
            specificity = _TYPE_WILDCARD
        elif (range_kind, range_subtype) == ("*", "*"):
            specificity = _ANY
        else:
            continue
        q = _weight(params)
        if q is None:
            continue
        if best is None or specificity > best[0] or (specificity == best[0] and q > best[1]):
            best = (specificity, q)
    return best is not None and best[1] > 0


def require(request: Request, media_type: str) -> None:
    """Raise 406 ``NOT_ACCEPTABLE`` unless the request's ``Accept`` admits ``media_type``."""
    if not admits(request.headers.get("accept"), media_type):
        raise ApiError(
            "NOT_ACCEPTABLE",
            f"{request.url.path} answers only {media_type}, which the request's Accept header does not "
            "admit: accept it, or a wildcard (*/*).",
        )


def _weight(params: list[str]) -> float | None:
    """The ``q`` of a media range's parameters (1 when absent); ``None`` when it is not valid."""
    for param in params:
        name, _, value = param.strip().partition("=")
        if name.strip().lower() != "q":
            continue
        try:
            q = float(value.strip())
        except ValueError:
            return None
        return q if 0 <= q <= 1 else None
    return 1.0
