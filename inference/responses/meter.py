"""The Responses stream's meter: what the one metered relay (:mod:`inference.relay`) does with
a chat stream rendered as Responses events (the live ``POST /v1/responses`` stream and a
background response's generation alike)."""

from __future__ import annotations

from collections.abc import Iterable

from inference import relay, render
from inference.call import Call
from inference.chat.leg import TranslatingMeter
from inference.responses.translate import StreamTranslator


class ResponsesMeter(TranslatingMeter):
    """The Responses stream's :class:`~inference.relay.Meter`: chat chunks in, Responses
    events out; a stream that ends early ends with ``response.failed``, one the relay cuts at
    the output cap with ``response.incomplete`` (``max_output_tokens``)."""

    translator: StreamTranslator

    def tail(self, call: Call, fault: relay.Fault | None) -> Iterable[bytes]:
        if fault is None:
            return self.translator.completed(call.usage, render.infrai(call))
        return self.translator.failed(call.usage, render.infrai(call), fault.message)
