"""Confluent Schema Registry's errors: an HTTP status, an ``error_code`` and a message, sent
as ``{"error_code": N, "message": "..."}`` (clients such as confluent-kafka's
SchemaRegistryClient read both).  The codes and wordings are Confluent's (its REST API
reference, "Errors"), so a client's handling of them works unchanged."""

from __future__ import annotations


class RegistryError(Exception):
    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message

    def body(self) -> dict:
        return {"error_code": self.error_code, "message": self.message}


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RegistryError:
    if schema_id is None:
        return RegistryError(404, 40403, "Schema not found")
    return RegistryError(404, 40403, f"Schema {schema_id} not found")


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40404, f"Subject '{subject}' was soft deleted.Set permanent=true "
                         "to delete permanently")


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40405, f"Subject '{subject}' was not deleted first before being "
                         "deleted permanently")


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(404, 40406, f"Subject '{subject}' Version {version} was soft deleted."
                         "Set permanent=true to delete permanently")


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(404, 40407, f"Subject '{subject}' Version {version} was not deleted "
                         "first before being permanently deleted")


def subject_config_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level "
                         "compatibility configured")


def subject_mode_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40409, f"Subject '{subject}' does not have subject-level mode "
                         "configured")


def incompatible(message: str) -> RegistryError:
    return RegistryError(409, 409, message)


def invalid_schema(detail: str) -> RegistryError:
    return RegistryError(422, 42201, f"Invalid schema {detail}")


def invalid_version(version: str) -> RegistryError:
    return RegistryError(422, 42202, f"The specified version '{version}' is not a valid version "
                         "id. Allowed values are between [1, 2^31-1] and the string \"latest\"")


def invalid_compatibility_level(level: str) -> RegistryError:
    return RegistryError(422, 42203, f"Invalid compatibility level. Valid values are none, "
                         f"backward, forward, full, backward_transitive, forward_transitive, "
                         f"and full_transitive (given: {level!r})")


def invalid_mode(mode: str) -> RegistryError:
    return RegistryError(422, 42204, f"Invalid mode. Valid values are READWRITE, READONLY and "
                         f"IMPORT (given: {mode!r})")


def operation_not_permitted(message: str) -> RegistryError:
    return RegistryError(422, 42205, message)


def reference_exists(message: str) -> RegistryError:
    return RegistryError(422, 42206, message)


def unprocessable(message: str) -> RegistryError:
    """A request Confluent refuses as 422 with the generic code (a field of the wrong type,
    an unknown schemaType ...)."""
    return RegistryError(422, 422, message)


def bad_request(message: str) -> RegistryError:
    """A body that is not JSON (Confluent's Jersey answers 400 with the parser's words)."""
    return RegistryError(400, 400, message)


def store_error(message: str) -> RegistryError:
    return RegistryError(500, 50001, f"Error in the backend data store - {message}")


def store_timeout(message: str) -> RegistryError:
    return RegistryError(500, 50002, f"Operation timed out - {message}")
