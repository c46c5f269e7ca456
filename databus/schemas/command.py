"""``databus schemas``: the schema registry from the command line, through its REST API
(Confluent's, so it works with any Confluent-compatible registry too).

    databus schemas list [--prefix P] [--deleted]
    databus schemas get SUBJECT [--version V] [--schema]  |  get --id ID [--schema]
    databus schemas register SUBJECT FILE|- [--type AVRO|JSON|PROTOBUF] [--reference N=S:V]
                             [--normalize]
    databus schemas check SUBJECT FILE|- [--version V] [--type AVRO|JSON|PROTOBUF]
    databus schemas delete SUBJECT [--version V] [--permanent]
    databus schemas config [SUBJECT] [--set LEVEL | --delete]
    databus schemas mode [SUBJECT] [--set MODE | --delete]

Every action takes ``--json`` (the registry's own answer on stdout).  The registry is
``--registry URL``, else ``schema.registry.listen`` of the broker section of ``-c FILE``
(default ./sidecar.yaml when there is one), else http://127.0.0.1:8081.  Exit status: 0
done (for ``check``: compatible), 1 refused by the registry or unreachable (for ``check``:
incompatible), 2 bad usage.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

from databus.schemas.client import guess_type

DEFAULT_URL = "http://127.0.0.1:8081"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class SchemasToolError(Exception):
    """One line for the user, exit 1."""


def add_arguments(parser) -> None:
    parser.add_argument("--registry", metavar="URL",
                        help=f"the registry's URL (default: schema.registry.listen of -c FILE's "
                        f"broker section, else {DEFAULT_URL})")
    parser.add_argument("-c", "--config", metavar="FILE",
                        help="a sidecar.yaml whose broker options name schema.registry.listen "
                        "(default ./sidecar.yaml if present)")
    parser.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help_text: str):
        sub = actions.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--json", action="store_true",
                         help="print the registry's answer as JSON")
        return sub

    p = action("list", "subjects with their latest version, id and type")
    p.add_argument("--prefix", default="", help="only subjects starting with this")
    p.add_argument("--deleted", action="store_true", help="include soft-deleted subjects")

    p = action("get", "a subject's version (latest by default), or a schema by id")
    p.add_argument("subject", nargs="?")
    p.add_argument("--version", default="latest")
    p.add_argument("--id", type=int, help="the schema of this id (no SUBJECT)")
    p.add_argument("--schema", action="store_true", help="print only the schema text")
    p.add_argument("--deleted", action="store_true", help="soft-deleted versions too")

    for name, help_text in (("register", "register a schema under a subject; prints its id"),
                            ("check", "is a schema compatible with a subject's versions?")):
        p = action(name, help_text)
        p.add_argument("subject")
        p.add_argument("file", help="the schema's file, - for stdin")
        p.add_argument("--type", default=None, choices=("AVRO", "JSON", "PROTOBUF"),
                       help="schema type (default: PROTOBUF for a .proto file, JSON for a "
                       "JSON Schema document, else AVRO)")
        p.add_argument("--reference", action="append", default=[],
                       metavar="NAME=SUBJECT:VERSION", help="a schema reference (repeatable)")
        p.add_argument("--normalize", action="store_true")
        if name == "check":
            p.add_argument("--version", default=None,
                           help="check against this version only (default: the versions "
                           "the subject's compatibility level names)")

    p = action("delete", "soft-delete a subject or one version (--permanent: for good)")
    p.add_argument("subject")
    p.add_argument("--version")
    p.add_argument("--permanent", action="store_true",
                   help="delete for good (it must be soft-deleted first)")

    for name, what in (("config", "compatibility level"), ("mode", "mode")):
        p = action(name, f"show or set the global or a subject's {what}")
        p.add_argument("subject", nargs="?")
        group = p.add_mutually_exclusive_group()
        group.add_argument("--set", metavar="LEVEL" if name == "config" else "MODE")
        group.add_argument("--delete", action="store_true",
                           help=f"remove the subject's own {what} (the global one applies)")


def registry_url(args) -> str:
    if args.registry:
        return args.registry.rstrip("/")
    path = args.config or ("sidecar.yaml" if os.path.exists("sidecar.yaml") else None)
    if path:
        from databus.config import ConfigError, broker_registry_url, load_config

        try:
            config = load_config(path)
        except (ConfigError, OSError) as exc:
            raise SchemasToolError(f"{path}: {exc}") from None
        url = broker_registry_url(config)
        if url:
            return url
        if args.config:
            raise SchemasToolError(f"{path}: its broker section sets no "
                                   "schema.registry.listen; give --registry URL")
    return DEFAULT_URL


class Client:
    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.timeout = timeout

    def __call__(self, method: str, path: str, body=None, **query):
        query = {k: ("true" if v is True else v) for k, v in query.items()
                 if v not in (None, False)}
        url = self.url + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method,
                                         headers={"Content-Type": CONTENT_TYPE,
                                                  "Accept": CONTENT_TYPE})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                answer = json.loads(raw)
                message = f"{answer['error_code']} {answer['message']}"
            except (ValueError, KeyError, TypeError):
                message = f"HTTP {error.code} {raw[:200]!r}"
            raise SchemasToolError(message) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise SchemasToolError(f"cannot reach the schema registry at {self.url}: "
                                   f"{reason}") from None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _schema_body(args) -> dict:
    try:
        text = sys.stdin.read() if args.file == "-" else open(args.file).read()
    except OSError as exc:
        raise SchemasToolError(f"{args.file}: {exc.strerror}") from None
    schema_type = args.type or guess_type(text, args.file)
    body: dict = {"schema": text}
    if schema_type != "AVRO":
        body["schemaType"] = schema_type
    references = []
    for item in args.reference:
        name, _, rest = item.partition("=")
        subject, _, version = rest.rpartition(":")
        if not name or not subject or not version.lstrip("-").isdigit():
            raise SchemasToolError(f"--reference {item!r}: give NAME=SUBJECT:VERSION")
        references.append({"name": name, "subject": subject, "version": int(version)})
    if references:
        body["references"] = references
    return body


def _print(args, document, text: str) -> None:
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print(text)


def main(args) -> int:
    call = Client(registry_url(args), args.timeout)
    action = args.action
    if action == "list":
        subjects = call("GET", "/subjects", deleted=args.deleted, subjectPrefix=args.prefix
                        or None)
        rows = []
        for subject in subjects:
            latest = call("GET", f"/subjects/{_q(subject)}/versions/latest",
                          deleted=args.deleted)
            rows.append({"subject": subject, "version": latest["version"], "id": latest["id"],
                         "schemaType": latest.get("schemaType", "AVRO")})
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            from databus.cli_helpers.table import print_table

            print_table(["SUBJECT", "VERSION", "ID", "TYPE"],
                        [[r["subject"], r["version"], r["id"], r["schemaType"]] for r in rows])
        return 0
    if action == "get":
        if args.id is not None:
            found = call("GET", f"/schemas/ids/{args.id}")
        elif args.subject:
            found = call("GET", f"/subjects/{_q(args.subject)}/versions/{_q(args.version)}",
                         deleted=args.deleted)
        else:
            raise SchemasToolError("give a SUBJECT or --id ID")
        if args.schema and not args.json:
            print(_pretty(found["schema"]))
        else:
            head = " ".join(f"{k}={found[k]}" for k in ("subject", "version", "id")
                            if k in found)
            refs = "".join(f"\nreference {r['name']} = {r['subject']}:{r['version']}"
                           for r in found.get("references", ()))
            _print(args, found, f"{head} type={found.get('schemaType', 'AVRO')}{refs}\n"
                                f"{_pretty(found['schema'])}")
        return 0
    if action == "register":
        body = _schema_body(args)
        answer = call("POST", f"/subjects/{_q(args.subject)}/versions", body,
                      normalize=args.normalize)
        version = call("POST", f"/subjects/{_q(args.subject)}", body, normalize=args.normalize)
        _print(args, {**answer, "version": version.get("version")},
               f"{args.subject}: version {version.get('version')}, id {answer['id']}")
        return 0
    if action == "check":
        path = f"/compatibility/subjects/{_q(args.subject)}/versions"
        if args.version:
            path += f"/{_q(args.version)}"
        answer = call("POST", path, _schema_body(args), verbose=True,
                      normalize=args.normalize)
        lines = ["compatible" if answer["is_compatible"] else "incompatible"]
        lines += [f"  {m}" for m in answer.get("messages", ())]
        _print(args, answer, "\n".join(lines))
        return 0 if answer["is_compatible"] else 1
    if action == "delete":
        if args.version:
            answer = call("DELETE", f"/subjects/{_q(args.subject)}/versions/"
                          f"{_q(args.version)}", permanent=args.permanent)
            text = f"{args.subject}: version {answer} deleted"
        else:
            answer = call("DELETE", f"/subjects/{_q(args.subject)}", permanent=args.permanent)
            text = f"{args.subject}: versions {', '.join(map(str, answer))} deleted"
        _print(args, answer, text + (" permanently" if args.permanent else
                                     " (soft: --permanent deletes them for good)"))
        return 0
    if action in ("config", "mode"):
        path = f"/{action}" + (f"/{_q(args.subject)}" if args.subject else "")
        key = "compatibility" if action == "config" else "mode"
        if args.set:
            answer = call("PUT", path, {key: args.set})
        elif args.delete:
            if not args.subject:
                raise SchemasToolError(f"--delete needs a SUBJECT (the global {action} "
                                       "stays)")
            answer = call("DELETE", path)
        else:
            answer = call("GET", path, defaultToGlobal=bool(args.subject) or None)
        value = answer.get("compatibilityLevel", answer.get("compatibility",
                                                            answer.get("mode")))
        where = args.subject or "global"
        _print(args, answer, f"{where}: {value}" + (" (removed)" if args.delete else ""))
        return 0
    raise SchemasToolError(f"unknown action {action}")


def _pretty(schema: str) -> str:
    try:
        return json.dumps(json.loads(schema), indent=2)
    except ValueError:
        return schema


def run(args) -> int:
    try:
        return main(args)
    except SchemasToolError as exc:
        print(f"databus schemas: {exc}", file=sys.stderr)
        return 1
