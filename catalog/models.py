"""The catalog: vendors, models, offerings (a model as one vendor serves it), prices and the
parameter matrix.

Writes go through :mod:`catalog.services` (which bump the catalog version so every process
rebuilds its routing snapshot); reads for the hot path go through :mod:`catalog.selectors`.
Money is integer nano-USD (1e-9 USD) in ``BigIntegerField``s.
"""

from __future__ import annotations

from typing import NamedTuple

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator
from django.db import models
from django.utils import timezone

from catalog.types import Support
from money.usd import nanos_to_usd_str


class AdapterKind(models.TextChoices):
    """The wire format a vendor speaks (one adapter module in ``inference/vendors/`` each)."""

    OPENAI = "openai", "OpenAI-compatible"
    ANTHROPIC = "anthropic", "Anthropic Messages"
    AZURE = "azure", "Azure OpenAI"
    GEMINI = "gemini", "Google Gemini"
    BEDROCK = "bedrock", "AWS Bedrock (Converse)"


class Capability(models.TextChoices):
    """What a model can do; a request needs a set of these (see :mod:`catalog.routing`)."""

    CHAT = "chat", "Chat"
    VISION = "vision", "Vision (image input)"
    TOOLS = "tools", "Tool calling"
    JSON_MODE = "json_mode", "JSON mode / structured output"
    EMBEDDINGS = "embeddings", "Embeddings"
    IMAGES = "images", "Image generation"
    SPEECH = "speech", "Text to speech"
    TRANSCRIPTION = "transcription", "Speech to text"
    MODERATION = "moderation", "Moderation"
    RESPONSES = "responses", "Responses API"
    # vLLM's / SGLang's own request fields: a request that sets one is routed only to models that
    # list it (inference/chat/validation.py: VLLM_EXTRAS).
    MIN_P = "min_p", "min_p sampling (vLLM, SGLang)"
    GUIDED_JSON = "guided_json", "guided decoding by JSON schema (vLLM)"
    GUIDED_REGEX = "guided_regex", "guided decoding by regex (vLLM)"
    GUIDED_CHOICE = "guided_choice", "guided decoding by choice list (vLLM)"
    GUIDED_GRAMMAR = "guided_grammar", "guided decoding by grammar (vLLM)"


class Parameter(models.TextChoices):
    """The request parameters the matrix covers (columns of the matrix editor)."""

    N = "n", "n"
    LOGPROBS = "logprobs", "logprobs"
    TOP_LOGPROBS = "top_logprobs", "top_logprobs"
    LOGIT_BIAS = "logit_bias", "logit_bias"
    SEED = "seed", "seed"
    REPETITION_PENALTY = "repetition_penalty", "repetition_penalty"
    TOP_K = "top_k", "top_k"
    TOOLS = "tools", "tools"
    RESPONSE_FORMAT = "response_format", "response_format"
    STOP = "stop", "stop"
    TEMPERATURE = "temperature", "temperature"
    TOP_P = "top_p", "top_p"
    PRESENCE_PENALTY = "presence_penalty", "presence_penalty"
    FREQUENCY_PENALTY = "frequency_penalty", "frequency_penalty"
    DIMENSIONS = "dimensions", "dimensions"


class Vendor(models.Model):
    """Someone who serves models over HTTP (a company's API, or our own gpu-backend).

    ``credentials_env`` is the *name* of a setting / environment variable holding the API key
    (``OPENAI_API_KEY``), read at call time — never the secret. Empty: no credentials needed.
    ``base_url_setting`` optionally names a setting whose value overrides ``base_url`` (the
    gpu-backend's ``INFRAI_GPU_BACKEND_URL``). ``api_version``: the wire-format version the
    adapter sends (Azure's ``api-version``, Anthropic's ``anthropic-version``; empty = the
    adapter's default). ``parameter_rules``: request parameters this vendor is known to refuse
    or ignore whatever the model, ``{parameter: {"support": "fails" | "no_effect", "source":
    URL}}`` (the OpenAI-compatible hosts' presets). ``verified_models`` are the upstream model
    ids the vendor's own model listing named at the last successful probe
    (:mod:`catalog.probes`); an offering is routable only when its upstream model is among them.
    """

    name = models.SlugField(max_length=64, unique=True)
    display_name = models.CharField(max_length=128, blank=True)
    adapter_kind = models.CharField(max_length=16, choices=AdapterKind.choices)
    base_url = models.URLField(max_length=300)
    base_url_setting = models.CharField(max_length=64, blank=True)
    credentials_env = models.CharField(max_length=64, blank=True)
    region = models.CharField(max_length=64, blank=True)
    api_version = models.CharField(max_length=32, blank=True)
    parameter_rules = models.JSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)
    verified_models = models.JSONField(default=list, blank=True)
    verified_at = models.DateTimeField(null=True, blank=True)
    last_probe_error = models.TextField(blank=True)
    notes = models.TextField(blank=True)

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class Model(models.Model):
    """A model as customers name it (``model_id``: what they type in the ``model`` field).

    ``quality_tier`` (1 = smallest … 10 = flagship) ranks ``smartest`` and weighs ``auto``;
    ``tasks`` are tags (``coding``, ``reasoning`` …) that ``extra_body.task`` narrows to.
    """

    model_id = models.CharField(max_length=128, unique=True)
    display_name = models.CharField(max_length=128, blank=True)
    owned_by = models.CharField(max_length=64)
    description = models.TextField(blank=True)
    capabilities = models.JSONField(default=list, blank=True)
    tasks = models.JSONField(default=list, blank=True)
    context_window = models.PositiveIntegerField(default=0)
    max_output_tokens = models.PositiveIntegerField(default=0)
    default_output_tokens = models.PositiveIntegerField(
        default=0,
        help_text="Output tokens a request that sets no max_tokens gets (sent to the vendor and "
        "held for). 0: the vendor's own default, held at the output limit.",
    )
    embedding_dimensions = models.PositiveIntegerField(null=True, blank=True)
    quality_tier = models.PositiveSmallIntegerField(default=5)
    tokenizer = models.CharField(
        max_length=32,
        blank=True,
        help_text="The tiktoken encoding the model reads token-id input with (cl100k_base for "
        "OpenAI's embedding models). Empty: another tokenizer — token-id input in OpenAI's "
        "cl100k_base ids is decoded to text before it is sent.",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ("model_id",)

    def __str__(self) -> str:
        return self.model_id

    def clean(self) -> None:
        """A default output limit within the output limit (when the model has one)."""
        super().clean()
        if self.max_output_tokens and self.default_output_tokens > self.max_output_tokens:
            raise ValidationError(
                {
                    "default_output_tokens": f"At most the output limit "
                    f"({self.max_output_tokens} tokens)."
                }
            )


#: What describes a :class:`Vendor` besides its ``name``: the fields a catalog document
#: carries and the admin's vendor form edits.
VENDOR_FIELDS = (
    "display_name",
    "adapter_kind",
    "base_url",
    "base_url_setting",
    "credentials_env",
    "region",
    "api_version",
    "parameter_rules",
    "enabled",
    "notes",
)


#: What describes a :class:`Model` besides its ``model_id`` and ``created_at``: the fields a
#: catalog document carries and the admin's model form edits.
MODEL_FIELDS = (
    "display_name",
    "owned_by",
    "description",
    "capabilities",
    "tasks",
    "context_window",
    "max_output_tokens",
    "default_output_tokens",
    "embedding_dimensions",
    "quality_tier",
    "tokenizer",
)


class Offering(models.Model):
    """``model`` as ``vendor`` serves it under ``upstream_model``.

    ``priority``: lower is tried first among offerings of one pinned model.
    """

    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="offerings")
    vendor = models.ForeignKey(Vendor, on_delete=models.CASCADE, related_name="offerings")
    upstream_model = models.CharField(max_length=200)
    priority = models.IntegerField(default=100)
    enabled = models.BooleanField(default=True)
    batch_discount_percent = models.PositiveSmallIntegerField(
        default=50,
        validators=[MaxValueValidator(100)],
        help_text="The Batch API's discount on this offering's price, in percent (0-100).",
    )

    class Meta:
        ordering = ("model__model_id", "priority", "vendor__name")
        constraints = [
            models.UniqueConstraint(fields=("vendor", "model"), name="offering_vendor_model_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.vendor.name}/{self.model.model_id}"


class Price(models.Model):
    """The prices of an offering from ``effective_from`` on, until the next row's.

    A price change is a new row, never an edit, so the price of any past call can be found.
    Integer nano-USD: per 1M input / cached input / cache-write (5 minutes, 1 hour) / output /
    reasoning tokens, per image keyed ``"<size>/<quality>"`` (``"*"`` = any other), per 1M
    characters of speech, per second of audio. The cache-write and reasoning prices may be
    left empty (``None``): then they are the defaults ``catalog.selectors.price_snapshot``
    applies (1.25× and 2× the input price, the output price).
    """

    offering = models.ForeignKey(Offering, on_delete=models.CASCADE, related_name="prices")
    effective_from = models.DateTimeField(default=timezone.now)
    input_per_mtok_nanos = models.BigIntegerField(default=0)
    cached_input_per_mtok_nanos = models.BigIntegerField(default=0)
    cache_write_5m_per_mtok_nanos = models.BigIntegerField(null=True, blank=True)
    cache_write_1h_per_mtok_nanos = models.BigIntegerField(null=True, blank=True)
    output_per_mtok_nanos = models.BigIntegerField(default=0)
    reasoning_per_mtok_nanos = models.BigIntegerField(null=True, blank=True)
    per_image_nanos = models.JSONField(default=dict, blank=True)
    per_mchar_nanos = models.BigIntegerField(default=0)
    per_audio_second_nanos = models.BigIntegerField(default=0)
    source = models.CharField(max_length=300, help_text="Where the price comes from (URL, note).")

    class Meta:
        ordering = ("offering_id", "-effective_from")
        constraints = [
            models.UniqueConstraint(
                fields=("offering", "effective_from"), name="price_offering_from_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"price of {self.offering_id} from {self.effective_from:%Y-%m-%d %H:%M}"

    def per_image_usd(self) -> dict[str, str]:
        """``per_image_nanos`` as exact USD strings, by ``"<size>/<quality>"`` in order."""
        return {
            k: nanos_to_usd_str(int(v)) for k, v in sorted((self.per_image_nanos or {}).items())
        }


class UsdPrice(NamedTuple):
    """One flat price of a :class:`Price` row as people write it: ``name`` in USD (catalog
    documents, the admin's price form), ``column`` the integer nano-USD field, ``label`` what
    staff read. ``optional``: the column may be empty (``None``, the catalog's default applies);
    otherwise empty is 0."""

    name: str
    column: str
    label: str
    optional: bool = False


#: The flat prices of a :class:`Price` row (``per_image_nanos`` is a mapping, handled apart).
USD_PRICES: tuple[UsdPrice, ...] = (
    UsdPrice("input_per_mtok_usd", "input_per_mtok_nanos", "Input, USD per 1M tokens"),
    UsdPrice(
        "cached_input_per_mtok_usd",
        "cached_input_per_mtok_nanos",
        "Cached input, USD per 1M tokens",
    ),
    UsdPrice(
        "cache_write_5m_per_mtok_usd",
        "cache_write_5m_per_mtok_nanos",
        "Cache write (5 min), USD per 1M tokens; empty: 1.25× input",
        optional=True,
    ),
    UsdPrice(
        "cache_write_1h_per_mtok_usd",
        "cache_write_1h_per_mtok_nanos",
        "Cache write (1 hour), USD per 1M tokens; empty: 2× input",
        optional=True,
    ),
    UsdPrice("output_per_mtok_usd", "output_per_mtok_nanos", "Output, USD per 1M tokens"),
    UsdPrice(
        "reasoning_per_mtok_usd",
        "reasoning_per_mtok_nanos",
        "Reasoning, USD per 1M tokens; empty: the output price",
        optional=True,
    ),
    UsdPrice("per_mchar_usd", "per_mchar_nanos", "Speech, USD per 1M characters"),
    UsdPrice("per_audio_second_usd", "per_audio_second_nanos", "Audio, USD per second"),
)


class ParameterRule(models.Model):
    """One cell of the parameter matrix.

    ``accepted_values`` (a JSON list): when not empty, the request value must be one of them or
    the parameter *fails*; a ``fails`` cell with accepted values accepts exactly those
    (MiniMax-M3's ``repetition_penalty`` at 1.0). ``max_value``: the model's limit, checked
    before routing — the largest ``n``, the largest token id ``logit_bias`` may name (vocabulary
    size - 1), the largest ``dimensions``.
    """

    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="parameter_rules")
    parameter = models.CharField(max_length=32, choices=Parameter.choices)
    support = models.CharField(max_length=16, choices=Support.choices)
    accepted_values = models.JSONField(default=list, blank=True)
    max_value = models.PositiveBigIntegerField(null=True, blank=True)
    note = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ("model__model_id", "parameter")
        constraints = [
            models.UniqueConstraint(fields=("model", "parameter"), name="rule_model_param_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.model.model_id}.{self.parameter}={self.support}"
