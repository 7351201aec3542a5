"""The `llm_error_handling:` section of the operator config (pydantic only)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class CircuitBreakerConfig(BaseModel):
    """`llm_error_handling.circuit_breaker:` - pause calls to a model that keeps failing."""

    model_config = ConfigDict(extra="forbid")

    failure_threshold: int = Field(
        5, ge=1, description="Consecutive transient or busy failures of one model that open "
        "its circuit; while open, calls to it fail at once with an error reply.")
    recovery_timeout_sec: float = Field(
        60.0, gt=0, description="Seconds the circuit stays open before one trial call is let "
        "through; its success closes the circuit, its failure opens it again.")


class LlmErrorHandlingConfig(BaseModel):
    """`llm_error_handling:` - retries, backoff, circuit breaker and concurrency cap."""

    model_config = ConfigDict(extra="forbid")

    retry_max_attempts: int = Field(
        3, ge=1, le=10, description="Most attempts of one model call (the first included) "
        "for transient and busy errors.")
    retry_base_delay_ms: int = Field(
        1000, ge=0, description="Shortest wait before a retry, in milliseconds (jittered "
        "exponential backoff between this and `retry_cap_delay_ms`).")
    retry_cap_delay_ms: int = Field(
        8000, ge=0, description="Longest backoff wait, in milliseconds.")
    burst_retry_max_attempts: int = Field(
        2, ge=1, le=10, description="Most attempts when the provider says the request rate "
        "rose too fast (`limit_burst_rate`; a plain 429 is transient). Bounded by "
        "`retry_max_attempts` too.")
    burst_retry_base_delay_ms: int = Field(
        5000, ge=0, description="Shortest wait before retrying a burst-limited call, in "
        "milliseconds.")
    # Declared like `CircuitBreakerConfig`'s fields above: alike in shape only.
    max_retry_after_sec: float = Field(
        60.0, ge=0, description="A provider's Retry-After is honoured up to this many "
        "seconds; asked to wait longer, the call gives up at once with an error reply.")
    max_concurrent_calls: int = Field(
        0, ge=0, description="Most model calls in flight in this process, across every "
        "agent (0: no cap). Fixed by the first agent built with a cap.")
    circuit_breaker: CircuitBreakerConfig = Field(default_factory=CircuitBreakerConfig)

    @model_validator(mode="after")
    def _cap_not_below_base(self) -> LlmErrorHandlingConfig:
        if self.retry_cap_delay_ms < self.retry_base_delay_ms:
            raise ValueError(
                f"retry_cap_delay_ms ({self.retry_cap_delay_ms}) is below retry_base_delay_ms "
                f"({self.retry_base_delay_ms}); raise the cap or lower the base")
        return self
