"""Ingest failures, each with the exit code the CLI returns for it (streams.exit_codes)."""

from __future__ import annotations

from streams.exit_codes import ExitCode


class IngestError(Exception):
    """An ingest failure the user can act on: the message names the input and the fix."""

    exit_code = ExitCode.USAGE


class InputNotFound(IngestError):
    exit_code = ExitCode.FILE_NOT_FOUND


class NotDbn(IngestError):
    """Empty file, wrong magic bytes, unknown DBN version or unreadable metadata."""

    exit_code = ExitCode.NOT_DBN


class UnsupportedSchema(IngestError):
    exit_code = ExitCode.UNSUPPORTED_SCHEMA


class CorruptDbn(IngestError):
    """Truncated or damaged records; everything before `offset` was read."""

    exit_code = ExitCode.CORRUPT

    def __init__(self, path: str, offset: int, detail: str):
        super().__init__(
            f"{path}: {detail} at byte {offset} of the decoded DBN stream; every record before "
            f"it was ingested, nothing after it was. Re-download or re-export the file"
        )
        self.path, self.offset, self.detail = path, offset, detail


class UnknownSymbol(IngestError):
    exit_code = ExitCode.UNKNOWN_SYMBOL


class BrokerDown(IngestError):
    exit_code = ExitCode.BROKER_UNAVAILABLE


class DeliveryFailed(IngestError):
    exit_code = ExitCode.DELIVERY_FAILED


class AuthFailed(IngestError):
    exit_code = ExitCode.AUTH_FAILED


class GatewayUnavailable(IngestError):
    exit_code = ExitCode.GATEWAY_UNAVAILABLE
