"""Options every console tool shares, spelled as Kafka's tools spell them.

* ``--bootstrap-server HOST:PORT`` (Kafka's name) with ``--bootstrap`` as our shorter alias:
  one ``dest`` so a tool reads ``args.bootstrap`` whichever was typed.
* ``--json``: one JSON document on stdout instead of the table or lines (field names are
  documented in docs/cli.md and kept stable: scripts depend on them).
* ``--property K=V`` (kafka-console-consumer/producer): parsed into a dict with the
  properties a tool knows, anything else refused by name.
"""

from __future__ import annotations

import argparse
import json
import sys

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def add_bootstrap(parser, *, default=DEFAULT_BOOTSTRAP, help: str | None = None) -> None:
    parser.add_argument(
        "--bootstrap-server", "--bootstrap", dest="bootstrap", default=default,
        metavar="HOST:PORT",
        help=help or f"a broker to ask (default {DEFAULT_BOOTSTRAP}); --bootstrap is an alias",
    )


def add_json(parser, *, default=False) -> None:
    parser.add_argument("--json", action="store_true", default=default,
                        help="print one JSON document on stdout (fields: docs/cli.md)")


def print_json(document) -> None:
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")
    sys.stdout.flush()


def bool_property(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"--property {name}={text}: expected true or false")
    return lowered == "true"


def parse_properties(items: list[str], known: dict[str, object]) -> dict[str, object]:
    """``--property K=V`` items over ``known`` (name -> default; a bool default makes the
    property a boolean); an unknown name or a malformed item raises ValueError naming it."""
    result = dict(known)
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--property expects K=V, got {item!r}")
        if name not in known:
            raise ValueError(f"unknown --property {name!r} (known: {', '.join(sorted(known))})")
        result[name] = bool_property(name, value) if isinstance(known[name], bool) else value
    return result


def add_client_settings(parser, kind: str) -> None:
    """-X K=V (ours), --{kind}-property K=V and --{kind}.config FILE (Kafka's console tools):
    client settings by Kafka's names; the file is a Java properties file (K=V lines, #
    comments).  Later settings win: the file, then each -X / --{kind}-property in order."""
    parser.add_argument("-X", f"--{kind}-property", dest="overrides", action="append",
                        default=[], metavar="KEY=VALUE",
                        help=f"{kind} setting by Kafka's name (repeatable)")
    parser.add_argument(f"--{kind}.config", dest="config_file", metavar="FILE",
                        help=f"{kind} settings from a properties file (K=V per line)")


def add_command_config(parser, whose: str = "admin client", *, defaults: bool = True) -> None:
    """-X K=V (alias --command-property) and --command-config FILE, as Kafka's admin tools
    take a secured cluster's settings (security.protocol, sasl.*, ssl.*); read them with
    client_settings.  ``defaults=False``: a parent parser for sub-commands that accept the
    options again without overriding the top-level values when absent."""
    parser.add_argument("-X", "--command-property", dest="overrides", action="append",
                        default=[] if defaults else argparse.SUPPRESS, metavar="KEY=VALUE",
                        help=f"{whose} setting by Kafka's name (repeatable)")
    parser.add_argument("--command-config", dest="config_file", metavar="FILE",
                        default=None if defaults else argparse.SUPPRESS,
                        help=f"{whose} settings from a properties file (K=V per line), "
                             "e.g. security.protocol, sasl.username, sasl.password")


def client_settings(args) -> dict[str, str]:
    """The settings of add_client_settings; raises KafkaError naming a bad item or file."""
    from databus.client import KafkaError, parse_overrides

    items: list[str] = []
    if getattr(args, "config_file", None):
        try:
            with open(args.config_file, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as exc:
            raise KafkaError(f"cannot read {args.config_file}: {exc.strerror}") from None
        items = [line.strip() for line in lines
                 if line.strip() and not line.lstrip().startswith(("#", "!"))]
    return parse_overrides(items + list(args.overrides))


def unescape(text: str) -> bytes:
    """A separator property as bytes; ``\\t``, ``\\n``, ``\\r`` typed in a shell (backslash
    and a letter) become the control character, as Kafka's console tools read them."""
    for escaped, char in (("\\t", "\t"), ("\\n", "\n"), ("\\r", "\r")):
        text = text.replace(escaped, char)
    return text.encode()


def run_admin(tool: str, main, args) -> int:
    """``trio.run(main)`` for an admin tool, its failures as one line on stderr (exit 1): a
    Kafka error as the broker named it, no answer within ``args.timeout`` naming the address."""
    import trio

    from databus.client import KafkaError

    try:
        return trio.run(main)
    except KafkaError as exc:
        print(f"databus {tool}: {exc}", file=sys.stderr)
        return 1
    except trio.TooSlowError:
        print(f"databus {tool}: no answer from {args.bootstrap} within {args.timeout:g}s",
              file=sys.stderr)
        return 1
