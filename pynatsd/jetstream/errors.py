"""JetStream API errors with nats-server's HTTP-like codes, error codes and descriptions."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error answered as `{"error": {"code", "err_code", "description"}}`."""

    def __init__(self, code: int, err_code: int, description: str) -> None:
        super().__init__(description)
        self.code = code
        self.err_code = err_code
        self.description = description

    def json(self) -> dict[str, Any]:
        return {"code": self.code, "err_code": self.err_code, "description": self.description}


def _e(code: int, err_code: int, description: str) -> ApiError:
    return ApiError(code, err_code, description)


def bad_request() -> ApiError:
    return _e(400, 10003, "bad request")


def insufficient_resources() -> ApiError:
    return _e(503, 10023, "insufficient resources")


def general(err: str) -> ApiError:
    return _e(500, 10051, err)


def invalid_json(err: str) -> ApiError:
    return _e(400, 10025, f"invalid JSON: {err}")


def stream_not_found() -> ApiError:
    return _e(404, 10059, "stream not found")


def stream_name_exist() -> ApiError:
    return _e(400, 10058, "stream name already in use with a different configuration")


def stream_mismatch() -> ApiError:
    return _e(400, 10056, "stream name in subject does not match request")


def subject_overlap() -> ApiError:
    return _e(400, 10065, "subjects overlap with an existing stream")


def replicas_not_supported() -> ApiError:
    return _e(500, 10074, "replicas > 1 not supported in non-clustered mode")


def stream_invalid_config(err: str) -> ApiError:
    return _e(500, 10052, err)


def no_message_found() -> ApiError:
    return _e(404, 10037, "no message found")


def msg_delete_failed(err: str) -> ApiError:
    return _e(500, 10057, err)


def sequence_not_found(seq: int) -> ApiError:
    return _e(400, 10043, f"sequence {seq} not found")


def purge_failed(err: str) -> ApiError:
    return _e(500, 10110, err)


def stream_not_match() -> ApiError:
    return _e(400, 10060, "expected stream does not match")


def wrong_last_sequence(seq: int) -> ApiError:
    return _e(400, 10071, f"wrong last sequence: {seq}")


def wrong_last_msg_id(msg_id: str) -> ApiError:
    return _e(400, 10070, f"wrong last msg ID: {msg_id}")


def store_failed(err: str) -> ApiError:
    return _e(503, 10077, err)


def too_many_requests() -> ApiError:
    return _e(429, 10167, "too many requests")


def message_too_big() -> ApiError:
    return _e(400, 10054, "message size exceeds maximum allowed")


def message_ttl_invalid() -> ApiError:
    return _e(400, 10165, "invalid per-message TTL")


def message_ttl_disabled() -> ApiError:
    return _e(400, 10166, "per-message TTL is disabled")


def rollup_failed(err: str) -> ApiError:
    return _e(500, 10111, err)


def stream_sealed() -> ApiError:
    return _e(400, 10109, "invalid operation on sealed stream")


def consumer_not_found() -> ApiError:
    return _e(404, 10014, "consumer not found")


def consumer_already_exists() -> ApiError:
    return _e(400, 10148, "consumer already exists")


def consumer_does_not_exist() -> ApiError:
    return _e(400, 10149, "consumer does not exist")


def consumer_create(err: str) -> ApiError:
    return _e(500, 10012, err)


def consumer_config_required() -> ApiError:
    return _e(400, 10078, "consumer config required")


def consumer_ephemeral_with_durable_name() -> ApiError:
    return _e(400, 10020, "consumer expected to be ephemeral but a durable name was set in request")


def consumer_durable_name_not_set() -> ApiError:
    return _e(400, 10018, "consumer expected to be durable but a durable name was not set")


def consumer_durable_name_mismatch() -> ApiError:
    return _e(400, 10017, "consumer name in subject does not match durable name in request")


def consumer_name_mismatch() -> ApiError:
    return _e(400, 10132, "Consumer Durable and Name have to be equal if both are provided")


def consumer_bad_durable_name() -> ApiError:
    return _e(400, 10103, "durable name can not contain '.', '*', '>'")


def consumer_filter_mismatch() -> ApiError:
    return _e(400, 10131, "Consumer create request did not match filtered subject from create subject")


def consumer_deliver_to_wildcards() -> ApiError:
    return _e(400, 10079, "consumer deliver subject has wildcards")


def consumer_duplicate_filters() -> ApiError:
    return _e(400, 10136, "consumer cannot have both FilterSubject and FilterSubjects specified")


def consumer_push_max_waiting() -> ApiError:
    return _e(400, 10080, "consumer in push mode can not set max waiting")


def consumer_max_deliver_backoff() -> ApiError:
    return _e(400, 10116, "max deliver is required to be > length of backoff values")


def consumer_invalid_policy(err: str) -> ApiError:
    return _e(400, 10094, err)


def flow_control_needs_heartbeats() -> ApiError:
    return _e(400, 10108, "consumer with flow control also needs heartbeats")


def consumer_pull_requires_ack() -> ApiError:
    return _e(400, 10084, "consumer in pull mode requires explicit ack policy on workqueue stream")


def consumer_wq_requires_explicit_ack() -> ApiError:
    return _e(400, 10098, "workqueue stream requires explicit ack")


def consumer_wq_multiple_unfiltered() -> ApiError:
    return _e(400, 10099, "multiple non-filtered consumers not allowed on workqueue stream")


def consumer_wq_not_unique() -> ApiError:
    return _e(400, 10100, "filtered consumer not unique on workqueue stream")


def consumer_wq_not_deliver_all() -> ApiError:
    return _e(400, 10101, "consumer must be deliver all on workqueue stream")


def consumer_invalid_group_name() -> ApiError:
    return _e(
        400,
        10162,
        "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters",
    )


def consumer_invalid_priority_group() -> ApiError:
    return _e(400, 10160, "Provided priority group does not exist for this consumer")
