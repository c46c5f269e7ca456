"""The registry's state and rules, without I/O: subjects, versions, ids, compatibility
levels and modes, built by applying the ``_schemas`` topic's records in log order.

Reads answer from the state.  A write is planned, not done: ``plan_*`` checks the request
against the state and returns the records to append to ``_schemas`` and the answer to give
once they are appended.  The shell (store.py) appends them and applies them back from the
log, so the state is always what the log says (also when another writer — a mirror of a
Confluent registry's topic — appends to it).  Writes are planned one at a time, after the
state has caught up with the log, which is what keeps ids and versions unique.

Ids are global: the same schema (type, text, references) gets the same id in every subject,
a new schema gets one more than the largest id ever seen, so ids are never reused while the
log keeps their records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from . import errors, records
from .formats import ParsedSchema, Reference, check_type, incompatibilities, parse

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE")
MODES = ("READWRITE", "READONLY", "IMPORT")
DEFAULT_LEVEL = "BACKWARD"
DEFAULT_MODE = "READWRITE"
MAX_VERSION = 2**31 - 1

Write = tuple[bytes, bytes | None]  # (key, value) of one record to append


@dataclass(frozen=True)
class Version:
    subject: str
    version: int
    id: int
    schema_type: str
    schema: str
    references: tuple[tuple[str, str, int], ...]  # (name, subject, version)
    deleted: bool = False

    def content(self) -> tuple:
        return (self.schema_type, self.schema, self.references)

    def references_json(self) -> list[dict]:
        return [{"name": n, "subject": s, "version": v} for n, s, v in self.references]

    def as_json(self) -> dict:
        """GET /subjects/{s}/versions/{v}: Confluent's body (schemaType only when not AVRO)."""
        body: dict = {"subject": self.subject, "version": self.version, "id": self.id}
        if self.schema_type != "AVRO":
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = self.references_json()
        body["schema"] = self.schema
        return body


class Registry:
    def __init__(self) -> None:
        self.subjects: dict[str, dict[int, Version]] = {}
        self.max_id = 0
        self.global_level: str | None = None
        self.subject_levels: dict[str, str] = {}
        self.global_mode: str | None = None
        self.subject_modes: dict[str, str] = {}
        self._parsed: dict[tuple, ParsedSchema] = {}
        # (type, text, references) -> the id first given to it (kept after deletions: the
        # same schema registered again gets its id back)
        self.ids: dict[tuple, int] = {}
        # id -> {(subject, version): Version}: lookups by id (every deserializer's first
        # call, and broker-side validation per record) without a scan of every subject
        self.by_id: dict[int, dict[tuple[str, int], Version]] = {}
        self.skipped = 0  # records not in Confluent's layout (logged by the shell)

    # -- applying the log -------------------------------------------------------------------

    def apply(self, record: records.Record) -> None:
        kind, subject, value = record.keytype, record.subject, record.value
        if kind == "SCHEMA":
            self._apply_schema(record)
        elif kind == "CONFIG":
            level = None if value is None else value.get("compatibilityLevel")
            if subject is None:
                self.global_level = level
            elif level is None:
                self.subject_levels.pop(subject, None)
            else:
                self.subject_levels[subject] = level
        elif kind == "MODE":
            mode = None if value is None else value.get("mode")
            if subject is None:
                self.global_mode = mode
            elif mode is None:
                self.subject_modes.pop(subject, None)
            else:
                self.subject_modes[subject] = mode
        elif kind == "DELETE_SUBJECT" and subject and value is not None:
            upto = value.get("version")
            versions = self.subjects.get(subject, {})
            for number, version in list(versions.items()):
                if not isinstance(upto, int) or number <= upto:
                    versions[number] = _replace(version, deleted=True)
                    self.by_id[version.id][(subject, number)] = versions[number]
        elif kind == "CLEAR_SUBJECT" and subject and value is not None:
            versions = self.subjects.get(subject, {})
            for number in [n for n, v in versions.items() if v.deleted]:
                self._unindex(versions.pop(number))
            if not versions:
                self.subjects.pop(subject, None)
        # NOOP and keytypes of newer registries (contexts, tags ...) change nothing here

    def _apply_schema(self, record: records.Record) -> None:
        subject, number, value = record.subject, record.version, record.value
        if not isinstance(subject, str) or number is None:
            raise records.RecordError("SCHEMA key without subject and version")
        if value is None:
            versions = self.subjects.get(subject)
            if versions is not None:
                gone = versions.pop(number, None)
                if gone is not None:
                    self._unindex(gone)
                if not versions:
                    del self.subjects[subject]
            return
        try:
            refs = tuple((str(r["name"]), str(r["subject"]), int(r["version"]))
                         for r in value.get("references") or ())
            version = Version(subject, number, int(value["id"]),
                              str(value.get("schemaType") or "AVRO").upper(),
                              str(value["schema"]), refs, bool(value.get("deleted", False)))
        except (KeyError, TypeError, ValueError) as exc:
            raise records.RecordError(f"SCHEMA value lacks {exc}") from None
        previous = self.subjects.setdefault(subject, {}).get(number)
        if previous is not None:
            self._unindex(previous)
        self.subjects[subject][number] = version
        self.by_id.setdefault(version.id, {})[(subject, number)] = version
        self.max_id = max(self.max_id, version.id)
        self.ids.setdefault(version.content(), version.id)

    def _unindex(self, version: Version) -> None:
        holders = self.by_id.get(version.id)
        if holders is not None:
            holders.pop((version.subject, version.version), None)
            if not holders:
                del self.by_id[version.id]

    # -- reads ------------------------------------------------------------------------------

    def subject_names(self, deleted: bool = False, prefix: str = "") -> list[str]:
        return sorted(s for s, versions in self.subjects.items()
                      if s.startswith(prefix)
                      and any(deleted or not v.deleted for v in versions.values()))

    def _versions(self, subject: str, deleted: bool = False) -> dict[int, Version]:
        versions = self.subjects.get(subject)
        live = {n: v for n, v in (versions or {}).items() if deleted or not v.deleted}
        if not live:
            raise errors.subject_not_found(subject)
        return dict(sorted(live.items()))

    def version_numbers(self, subject: str, deleted: bool = False) -> list[int]:
        return list(self._versions(subject, deleted))

    def get_version(self, subject: str, version: str | int, deleted: bool = False) -> Version:
        versions = self._versions(subject, deleted=True)
        number = parse_version(version)
        if number is None:
            live = [v for v in versions.values() if deleted or not v.deleted]
            if not live:
                raise errors.subject_not_found(subject)
            return live[-1]
        found = versions.get(number)
        if found is None or (found.deleted and not deleted):
            raise errors.version_not_found(subject, number)
        return found

    def referenced_by(self, subject: str, version: str | int) -> list[int]:
        target = self.get_version(subject, version)
        return sorted({v.id for versions in self.subjects.values() for v in versions.values()
                       if not v.deleted and any(s == target.subject and n == target.version
                                                for _, s, n in v.references)})

    def versions_with_id(self, schema_id: int, deleted: bool = False) -> list[Version]:
        holders = self.by_id.get(schema_id) or {}
        return [holders[key] for key in sorted(holders)
                if deleted or not holders[key].deleted]

    def schema_by_id(self, schema_id: int, subject: str | None = None) -> Version:
        found = self.versions_with_id(schema_id, deleted=True)
        if subject:
            found = [v for v in found if v.subject == subject] or found
        if not found:
            raise errors.schema_not_found(schema_id)
        return found[0]

    def level(self, subject: str | None = None) -> str:
        if subject is not None and subject in self.subject_levels:
            return self.subject_levels[subject]
        return self.global_level or DEFAULT_LEVEL

    def mode(self, subject: str | None = None) -> str:
        if subject is not None and subject in self.subject_modes:
            return self.subject_modes[subject]
        return self.global_mode or DEFAULT_MODE

    def parsed(self, schema_type: str, text: str,
               references: tuple[tuple[str, str, int], ...] = ()) -> ParsedSchema:
        """Parse (cached by content); references are resolved to their subjects' versions,
        which must exist (soft-deleted ones too: they still hold data)."""
        key = (schema_type, text, references)
        found = self._parsed.get(key)
        if found is None:
            resolved = self._resolve(references, depth=0)
            found = parse(schema_type, text, resolved)
            if len(self._parsed) > 10_000:
                self._parsed.clear()
            self._parsed[key] = found
        return found

    def _resolve(self, references, depth: int) -> tuple[Reference, ...]:
        if depth > 32:
            raise errors.invalid_schema("references nested more than 32 deep")
        out: list[Reference] = []
        for name, subject, number in references:
            try:
                target = self.get_version(subject, number, deleted=True)
            except errors.RegistryError:
                raise errors.invalid_schema(
                    f"reference {name!r}: subject {subject!r} version {number} not found"
                ) from None
            inner = self._resolve(target.references, depth + 1)
            out.extend(r for r in inner if r.name not in {o.name for o in out})
            out.append(Reference(name, parse(target.schema_type, target.schema, inner)))
        return tuple(out)

    def _pin(self, references):
        """References to ``latest`` (version -1) as the version they name now."""
        pinned = []
        for name, subject, number in references:
            if number == -1:
                try:
                    number = self.get_version(subject, "latest").version
                except errors.RegistryError:
                    raise errors.invalid_schema(
                        f"reference {name!r}: subject {subject!r} not found") from None
            pinned.append((name, subject, number))
        return tuple(pinned)

    def lookup(self, subject: str, request: dict, *, deleted: bool = False,
               normalize: bool = False) -> Version:
        """POST /subjects/{s}: the version of ``subject`` holding this schema."""
        schema_type, text, refs = _schema_fields(request)
        refs = self._pin(refs)
        self._versions(subject, deleted)  # 40401 when the subject is absent
        candidate = self.parsed(schema_type, text, refs)
        texts = {candidate.canonical, candidate.normalized, text}
        for version in reversed(self._versions(subject, deleted).values()):
            if (version.schema_type == schema_type and version.references == refs
                    and (version.schema in texts or self._same(version, candidate))):
                return version
        raise errors.schema_not_found()

    def _same(self, version: Version, candidate: ParsedSchema) -> bool:
        try:
            stored = self.parsed(version.schema_type, version.schema, version.references)
        except errors.RegistryError:
            return False
        return stored.canonical == candidate.canonical or (
            stored.normalized == candidate.normalized and candidate.normalized != "")

    def check(self, subject: str, request: dict, version: str | int | None,
              normalize: bool = False) -> list[str]:
        """POST /compatibility/subjects/{s}/versions[/{v}]: why the schema is incompatible
        ([] when it is compatible) against version ``v``, or the versions the subject's
        level says (``None``)."""
        schema_type, text, refs = _schema_fields(request)
        candidate = self.parsed(schema_type, text, self._pin(refs))
        level = self.level(subject)
        if version is None:
            if subject not in self.subjects:
                return []
            against = self._against(subject, level)
        else:
            against = [self.get_version(subject, version)]
        return self._problems(subject, candidate, against, level, verbose_old=version is None)

    def _against(self, subject: str, level: str) -> list[Version]:
        """The versions a new schema of ``subject`` is checked against, newest first."""
        live = [v for v in (self.subjects.get(subject) or {}).values() if not v.deleted]
        live.sort(key=lambda v: v.version, reverse=True)
        if level == "NONE" or not live:
            return []
        return live if level.endswith("_TRANSITIVE") else live[:1]

    def _problems(self, subject: str, candidate: ParsedSchema, against: list[Version],
                  level: str, verbose_old: bool = True) -> list[str]:
        if level == "NONE":
            return []
        problems: list[str] = []
        for old in against:
            old_parsed = self.parsed(old.schema_type, old.schema, old.references)
            found: list[str] = []
            if level.startswith(("BACKWARD", "FULL")):
                found += incompatibilities(candidate, old_parsed)
            if level.startswith(("FORWARD", "FULL")):
                found += incompatibilities(old_parsed, candidate)
            if found:
                problems += found + [f"{{oldSchemaVersion: {old.version}}}",
                                     f"{{oldSchema: '{old.schema}'}}",
                                     f"{{compatibility: '{level}'}}"]
                break
        return problems

    # -- writes (planned) -------------------------------------------------------------------

    def _writable(self, subject: str | None) -> str:
        mode = self.mode(subject)
        if mode == "READONLY":
            raise errors.operation_not_permitted(
                f"Subject {subject} is in read-only mode" if subject
                else "The registry is in read-only mode")
        return mode

    def plan_register(self, subject: str, request: dict, *,
                      normalize: bool = False) -> tuple[list[Write], dict]:
        mode = self._writable(subject)
        _check_subject(subject)
        schema_type, text, refs = _schema_fields(request)
        refs = self._pin(refs)
        wanted_id = request.get("id")
        wanted_version = request.get("version")
        for name, value in (("id", wanted_id), ("version", wanted_version)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or not 0 < value <= MAX_VERSION):
                raise errors.unprocessable(f"{name} must be a positive integer, not {value!r}")
        if wanted_version is not None and mode != "IMPORT":
            wanted_version = None if wanted_version == 0 else wanted_version
        candidate = self.parsed(schema_type, text, refs)
        stored_text = candidate.normalized if normalize else candidate.canonical
        versions = self.subjects.get(subject) or {}
        for version in sorted(versions.values(), key=lambda v: -v.version):
            if (not version.deleted and version.schema_type == schema_type
                    and version.references == refs
                    and (version.schema in (stored_text, text) or self._same(version, candidate))):
                if wanted_id is not None and wanted_id != version.id:
                    raise errors.operation_not_permitted(
                        f"Schema already registered with id {version.id} instead of input id "
                        f"{wanted_id}")
                return [], {"id": version.id}
        if mode != "IMPORT":
            level = self.level(subject)
            problems = self._problems(subject, candidate, self._against(subject, level), level)
            if problems:
                raise errors.incompatible(
                    f"Schema being registered is incompatible with an earlier schema for subject "
                    f"\"{subject}\", details: [{', '.join(problems)}]")
        schema_id = self._id_for(schema_type, stored_text, refs, candidate, wanted_id)
        number = wanted_version or max(versions, default=0) + 1
        if number in versions and not versions[number].deleted:
            raise errors.operation_not_permitted(
                f"Version {number} of subject {subject} already exists")
        if number > MAX_VERSION:
            raise errors.operation_not_permitted(f"Subject {subject} has no versions left")
        refs_json = [{"name": n, "subject": s, "version": v} for n, s, v in refs]
        return ([(records.schema_key(subject, number),
                  records.schema_value(subject, number, schema_id, schema_type, stored_text,
                                       refs_json))],
                {"id": schema_id})

    def _id_for(self, schema_type: str, stored_text: str, refs, candidate: ParsedSchema,
                wanted_id: int | None) -> int:
        same = None
        for text in (stored_text, candidate.canonical, candidate.normalized):
            same = self.ids.get((schema_type, text, refs))
            if same is not None:
                break
        if wanted_id is not None:
            holders = self.versions_with_id(wanted_id, deleted=True)
            if holders and not any(self._same(h, candidate) for h in holders):
                raise errors.operation_not_permitted(
                    f"Overwrite new schema with id {wanted_id} is not permitted.")
            return wanted_id
        return same if same is not None else self.max_id + 1

    def plan_delete_version(self, subject: str, version: str | int,
                            permanent: bool) -> tuple[list[Write], int]:
        self._writable(subject)
        versions = self.subjects.get(subject)
        if not versions:
            raise errors.subject_not_found(subject)
        number = parse_version(version)
        if number is None:
            target = self.get_version(subject, "latest", deleted=permanent)
        else:
            target = versions.get(number)
            if target is None:
                raise errors.version_not_found(subject, number)
        if not permanent:
            if target.deleted:
                raise errors.version_soft_deleted(subject, target.version)
            self._not_referenced([target])
            return [(records.schema_key(subject, target.version),
                     records.schema_value(subject, target.version, target.id,
                                          target.schema_type, target.schema,
                                          target.references_json(), deleted=True))], \
                target.version
        if not target.deleted:
            raise errors.version_not_soft_deleted(subject, target.version)
        return [(records.schema_key(subject, target.version), None)], target.version

    def plan_delete_subject(self, subject: str, permanent: bool) -> tuple[list[Write], list[int]]:
        self._writable(subject)
        versions = self.subjects.get(subject)
        if not versions:
            raise errors.subject_not_found(subject)
        live = [v for v in versions.values() if not v.deleted]
        numbers = sorted(versions)
        if not permanent:
            if not live:
                raise errors.subject_soft_deleted(subject)
            self._not_referenced(live)
            return [(records.schema_key(subject, v.version),
                     records.schema_value(subject, v.version, v.id, v.schema_type, v.schema,
                                          v.references_json(), deleted=True))
                    for v in sorted(live, key=lambda v: v.version)], \
                sorted(v.version for v in live)
        if live:
            raise errors.subject_not_soft_deleted(subject)
        writes: list[Write] = [(records.schema_key(subject, n), None) for n in numbers]
        if subject in self.subject_levels:
            writes.append((records.config_key(subject), None))
        if subject in self.subject_modes:
            writes.append((records.mode_key(subject), None))
        return writes, numbers

    def _not_referenced(self, targets: list[Version]) -> None:
        wanted = {(t.subject, t.version) for t in targets}
        for versions in self.subjects.values():
            for version in versions.values():
                if version.deleted or (version.subject, version.version) in wanted:
                    continue
                if any((s, n) in wanted for _, s, n in version.references):
                    raise errors.reference_exists(
                        "One or more references exist to the schema {magic=1,keytype=SCHEMA,"
                        f"subject={targets[0].subject},version={targets[0].version}}}.")

    def plan_config(self, subject: str | None, body: dict) -> tuple[list[Write], dict]:
        level = body.get("compatibility", body.get("compatibilityLevel"))
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise errors.invalid_compatibility_level(str(level))
        if subject is not None:
            _check_subject(subject)
        level = level.upper()
        return [(records.config_key(subject), records.config_value(level))], \
            {"compatibility": level}

    def plan_delete_config(self, subject: str | None) -> tuple[list[Write], dict]:
        if subject is None:
            return [(records.config_key(None), None)], {"compatibilityLevel": self.level()}
        if subject not in self.subject_levels:
            raise errors.subject_config_not_found(subject)
        return [(records.config_key(subject), None)], \
            {"compatibilityLevel": self.subject_levels[subject]}

    def plan_mode(self, subject: str | None, body: dict, force: bool = False
                  ) -> tuple[list[Write], dict]:
        mode = body.get("mode")
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise errors.invalid_mode(str(mode))
        mode = mode.upper()
        if mode == "IMPORT" and not force:
            names = [subject] if subject else list(self.subjects)
            if any(self.subjects.get(s) for s in names):
                raise errors.operation_not_permitted(
                    "Cannot import since found existing subjects")
        return [(records.mode_key(subject), records.mode_value(mode))], {"mode": mode}

    def plan_delete_mode(self, subject: str) -> tuple[list[Write], dict]:
        if subject not in self.subject_modes:
            raise errors.subject_mode_not_found(subject)
        return [(records.mode_key(subject), None)], {"mode": self.subject_modes[subject]}


def parse_version(version: str | int) -> int | None:
    """A version number, or None for ``latest`` (and -1); 42202 for anything else."""
    if isinstance(version, int) and not isinstance(version, bool):
        number = version
    elif isinstance(version, str) and version.lower() == "latest":
        return None
    else:
        try:
            number = int(str(version))
        except ValueError:
            raise errors.invalid_version(str(version)) from None
    if number == -1:
        return None
    if not 1 <= number <= MAX_VERSION:
        raise errors.invalid_version(str(version))
    return number


def _check_subject(subject: str) -> None:
    if not subject or len(subject) > 255 or any(ord(c) < 32 for c in subject):
        raise errors.unprocessable(f"Invalid subject {subject[:300]!r}")


def _schema_fields(request: dict) -> tuple[str, str, tuple[tuple[str, str, int], ...]]:
    """(schemaType, schema text, references) of a register/lookup/check body."""
    if not isinstance(request, dict):
        raise errors.unprocessable("the request body must be a JSON object")
    text = request.get("schema")
    if not isinstance(text, str) or not text.strip():
        raise errors.invalid_schema("Empty schema" if text in (None, "") else
                                    f"{json.dumps(text)[:200]}: the schema field is a string")
    schema_type = check_type(request.get("schemaType"))
    refs = []
    for ref in request.get("references") or ():
        if not isinstance(ref, dict):
            raise errors.unprocessable(f"a reference is an object, not {ref!r}")
        try:
            refs.append((str(ref["name"]), str(ref["subject"]), int(ref["version"])))
        except (KeyError, TypeError, ValueError):
            raise errors.unprocessable(
                f"a reference needs name, subject and version: {ref!r}") from None
    return schema_type, text, tuple(refs)


def _replace(version: Version, **changes) -> Version:
    from dataclasses import replace

    return replace(version, **changes)
