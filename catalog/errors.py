"""The routing decision's refusals, in the catalog's own terms (no HTTP).

:func:`catalog.routing.decide_route` raises one of these when it cannot give a request a
route. Each carries what the caller needs to act: ``message`` (customer-facing: names the
model, vendor or parameter and says what to send instead), ``code`` (the reason, in the words
of OpenAI's error codes: ``unsupported_parameter``, ``context_length_exceeded`` …) and
``param`` (the request field at fault, or ``None``). The web layer translates them where they
reach it (:func:`inference.errors.api_error`: one table, the OpenAI body, status and headers).
"""

from __future__ import annotations


class RoutingError(Exception):
    """Routing refused the request; see the subclasses for which way.

    ``param`` may be renamed by a caller that spells the request differently (the Responses
    API names ``max_tokens`` ``max_output_tokens``).
    """

    def __init__(self, message: str, *, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.param!r}, {self.message!r})"


class RoutingRefused(RoutingError):
    """The request asks for what no model it may use gives: a capability, a parameter or a
    value, more tokens than a window or output limit, an unknown ``prefer`` or ``task``. The
    same request will be refused again; ``param`` names the field to change."""


class ModelNotFound(RoutingError):
    """The ``model`` names no model, or a vendor that does not serve it (``model_not_found``,
    ``param`` ``model``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="model_not_found", param="model")


class NoRoute(RoutingError):
    """Nothing can serve the request right now (``no_routable_offering``).

    ``reasons``: ``(offering label, why)`` for the offerings left out, as the message lists
    them. ``permanent``: waiting will not change it (the only offerings are disabled, their
    vendor is not configured, or it does not list the model); otherwise (open circuits, a
    vendor not verified yet) the same request may route later.
    """

    def __init__(
        self,
        message: str,
        *,
        permanent: bool,
        reasons: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(message, code="no_routable_offering")
        self.permanent = permanent
        self.reasons = reasons
