"""``databus users``: the SASL users of a broker (SCRAM credentials; PLAIN logins check the
same ones).  What kafka-configs.sh --entity-type users --alter --add-config
'SCRAM-SHA-256=[iterations=4096,password=...]' and --describe do, shaped as a command.

    databus users add NAME [--mechanism M ...] [--iterations N]
                      [--password-file FILE | --password-stdin]
                      (--bootstrap-server HOST:PORT [-X K=V ...] [--command-config FILE]
                       | --data-dir DIR)
    databus users list   [--json] (--bootstrap-server ... | --data-dir DIR)
    databus users delete NAME [--mechanism M ...] (--bootstrap-server ... | --data-dir DIR)

With ``--bootstrap-server`` the change goes through a running broker
(AlterUserScramCredentials, which needs ALTER on the cluster when ACLs are on); with
``--data-dir`` it is written to the broker's store directly, which is how the first user of
a cluster that only has SASL listeners is made (the broker re-reads the store when it
changes).  ``--mechanism`` defaults to both SCRAM-SHA-256 and SCRAM-SHA-512.

The password is read from ``--password-file`` (its first line), from stdin
(``--password-stdin``) or asked for on the terminal; never from the command line, where
``ps`` would show it.  It is never printed, and the broker receives only the salted form.

Exit status: 0 done, 1 the broker refused or the store could not be written, 2 bad usage.
"""

from __future__ import annotations

import sys

from databus.cli_helpers.options import (
    add_bootstrap,
    add_command_config,
    add_json,
    client_settings,
    print_json,
    run_admin,
)

ACTIONS = ("add", "list", "delete")
SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def add_security_client_arguments(parser) -> None:
    """-X K=V and --command-config FILE: the admin client's settings (security.protocol,
    sasl.*, ssl.* to reach a secured broker), as Kafka's tools take them."""
    add_command_config(parser)
    parser.add_argument("--data-dir", metavar="DIR",
                        help="edit the store in this broker data directory (log.dirs) "
                             "instead of asking a running broker")
    parser.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                        help="give up after this long (default 30)")


def add_arguments(parser) -> None:
    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument("name", nargs="?", help="the user name (add, delete)")
    add_bootstrap(parser)
    parser.add_argument("--mechanism", action="append", choices=SCRAM, default=[],
                        help="SCRAM mechanism (repeatable; default both)")
    parser.add_argument("--iterations", type=int, default=4096,
                        help="SCRAM iterations, 4096..16384 (default 4096)")
    parser.add_argument("--password-file", metavar="FILE",
                        help="read the password from the first line of FILE")
    parser.add_argument("--password-stdin", action="store_true",
                        help="read the password from the first line of stdin")
    add_security_client_arguments(parser)
    add_json(parser)


def _password(args) -> str:
    if args.password_file:
        try:
            with open(args.password_file, encoding="utf-8") as f:
                text = f.readline().rstrip("\r\n")
        except OSError as exc:
            raise ValueError(f"cannot read --password-file {args.password_file}: "
                             f"{exc.strerror}") from None
    elif args.password_stdin or not sys.stdin.isatty():
        text = sys.stdin.readline().rstrip("\r\n")
    else:
        import getpass

        text = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != text:
            raise ValueError("the passwords differ")
    if not text:
        raise ValueError("empty password")
    return text


def run(args) -> int:
    if args.action in ("add", "delete") and not args.name:
        print(f"databus users {args.action}: a user NAME is required", file=sys.stderr)
        return 2
    if not 4096 <= args.iterations <= 16384:
        print("databus users: --iterations must be 4096..16384", file=sys.stderr)
        return 2
    mechanisms = list(dict.fromkeys(args.mechanism)) or list(SCRAM)
    password = None
    if args.action == "add":
        try:
            password = _password(args)
        except ValueError as exc:
            print(f"databus users add: {exc}", file=sys.stderr)
            return 2
    if args.data_dir:
        return _offline(args, mechanisms, password)
    return _online(args, mechanisms, password)


def _offline(args, mechanisms, password) -> int:
    from databus.protocol.sasl import make_credential
    from databus.storage.credentials import CredentialError, CredentialStore

    try:
        store = CredentialStore(args.data_dir).load()
        if args.action == "add":
            for mechanism in mechanisms:
                store.upsert(args.name, make_credential(mechanism, password,
                                                        iterations=args.iterations))
                print(f"Set {mechanism} credential of user {args.name}")
            return 0
        if args.action == "delete":
            gone = [m for m in mechanisms if store.delete(args.name, m)]
            if not gone:
                print(f"databus users delete: no user {args.name!r}", file=sys.stderr)
                return 1
            for mechanism in gone:
                print(f"Deleted {mechanism} credential of user {args.name}")
            return 0
        users = {user: [(m, c.iterations) for m, c in sorted(creds.items())]
                 for user, creds in store.users().items()}
    except (CredentialError, OSError) as exc:
        print(f"databus users: {exc}", file=sys.stderr)
        return 1
    return _print_users(args, users)


def _print_users(args, users: dict) -> int:
    if args.json:
        print_json({"users": [{"user": user, "credentials": [
            {"mechanism": m, "iterations": i} for m, i in creds]}
            for user, creds in sorted(users.items())]})
        return 0
    from databus.cli_helpers.table import print_table

    print_table(["USER", "MECHANISM", "ITERATIONS"],
                [[user, m, str(i)] for user, creds in sorted(users.items()) for m, i in creds])
    return 0


def _online(args, mechanisms, password) -> int:
    import trio

    from databus.client import AdminConfig, KafkaError

    try:
        settings = {"request.timeout.ms": int(args.timeout * 1000), **client_settings(args)}
        config = AdminConfig.from_kafka(settings)
    except KafkaError as exc:
        print(f"databus users: {exc}", file=sys.stderr)
        return 2

    async def main() -> int:
        from databus.client import Admin

        with trio.fail_after(args.timeout):
            async with Admin(args.bootstrap, config) as admin:
                if args.action == "list":
                    found = await admin.describe_user_scram_credentials()
                    return _print_users(args, {u: c for u, c in found.items()
                                               if not isinstance(c, Exception)})
                # Kafka refuses a user named twice in one request: one per mechanism
                for mechanism in mechanisms:
                    if args.action == "add":
                        results = await admin.alter_user_scram_credentials(upsertions=[
                            (args.name, mechanism, password, args.iterations)])
                        verb = "Set"
                    else:
                        results = await admin.alter_user_scram_credentials(
                            deletions=[(args.name, mechanism)])
                        verb = "Deleted"
                    error = results.get(args.name)
                    if error is not None:
                        print(f"databus users {args.action}: {mechanism}: {error}",
                              file=sys.stderr)
                        return 1
                    print(f"{verb} {mechanism} credential of user {args.name}")
                return 0

    return run_admin("users", main, args)
