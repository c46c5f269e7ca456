"""The console in front of a secured cluster: a ``databus broker`` with only a SASL_PLAINTEXT
listener and ACLs on, where admin is a super user and alice may use topic A only.

* configured credentials (``clusters:`` with ``${file:...}``): the console reaches the
  cluster, and the password shows in no page and no log;
* ``--login``: chromium gets the login page, a wrong password is refused without saying
  which part was wrong, alice sees A and not B, her produce to B shows Kafka's
  authorization error, logout returns to the login page; the session cookie is HttpOnly and
  SameSite=Strict; a read-only login console still refuses every action;
* refused logins are throttled per user name: past the limit the console answers 429 with
  Retry-After and does not ask the cluster, while another user from the same address still
  logs in;
* the status page's rows (read with the configuration's credentials) shown to alice are
  only those about topics her Metadata lists.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request

import pytest

from databus.client import SyncAdmin
from databus.console.sessions import FAILED_LOGIN_LIMITS, FAILED_LOGIN_WINDOW
from databus.protocol.sasl import make_credential
from databus.storage.credentials import CredentialStore
from tests.console.conftest import ConsoleProcess, databus, shoot
from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.timeout(120)

USERS = {"admin": "admin-secret-4K", "alice": "alice-secret-8P"}
ALLOWED, FORBIDDEN = "alice-topic", "admins-only"


class Secured:
    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.bootstrap = broker.bootstrap_for("SASL_PLAINTEXT")

    def settings(self, user: str, mechanism: str = "SCRAM-SHA-256") -> dict:
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                "sasl.username": user, "sasl.password": USERS[user]}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    root = tmp_path_factory.mktemp("secured")
    store = CredentialStore(root / "data")  # users made before the broker starts
    for user, password in USERS.items():
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            store.upsert(user, make_credential(mechanism, password))
    options = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
               "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
               "super.users": "User:admin", "num.partitions": 1}
    with BrokerProcess(root, options) as broker:
        cluster = Secured(broker)
        with SyncAdmin(cluster.bootstrap, cluster.settings("admin")) as admin:
            assert admin.create_topics([ALLOWED, FORBIDDEN]) == {ALLOWED: None, FORBIDDEN: None}
        yield cluster


def allow_alice(secured: Secured, tmp) -> None:
    """alice may produce to and consume from ALLOWED (group alice-group), nothing else:
    ``databus acls`` as the operator runs it."""
    properties = tmp / "admin.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in secured.settings("admin").items()))
    added = databus("acls", "--add", "--allow-principal", "User:alice", "--producer",
                    "--consumer", "--topic", ALLOWED, "--group", "alice-group",
                    "--bootstrap-server", secured.bootstrap, "--command-config", str(properties))
    assert added.returncode == 0, added.stderr


@pytest.fixture(scope="module")
def consoles(secured, tmp_path_factory):
    """Started together: configured credentials (sidecar.yaml, PLAIN, the password from a
    file), a login console (SCRAM-SHA-512), a read-only login console."""
    tmp = tmp_path_factory.mktemp("secured-console")
    (tmp / "password").write_text(USERS["admin"] + "\n")
    (tmp / "sidecar.yaml").write_text(
        f"clusters:\n  main:\n    bootstrap.servers: {secured.bootstrap}\n"
        f"    security.protocol: SASL_PLAINTEXT\n    sasl.mechanism: PLAIN\n"
        f"    sasl.username: admin\n    sasl.password: ${{file:{tmp}/password}}\n")
    login = ["--bootstrap", secured.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
             "-X", "sasl.mechanism=SCRAM-SHA-512", "--login"]
    processes = {
        "configured": ConsoleProcess(tmp, "-c", str(tmp / "sidecar.yaml")),
        "login": ConsoleProcess(tmp_path_factory.mktemp("login-console"), *login),
        "read-only": ConsoleProcess(tmp_path_factory.mktemp("ro-login-console"), *login,
                                    "--read-only"),
    }
    try:
        allow_alice(secured, tmp)  # while the consoles start
        yield {name: process.wait() for name, process in processes.items()}
    finally:
        for process in processes.values():
            process.close()


def answer(request: urllib.request.Request) -> tuple[int, dict, str]:
    """(status, headers, body) of ``request``, without following redirects."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def get(url: str, **headers) -> tuple[int, dict, str]:
    return answer(urllib.request.Request(url, headers=headers))


def post_login(url: str, user: str, password: str) -> tuple[int, dict, str]:
    """A login form posted as a script would."""
    form = urllib.parse.urlencode({"username": user, "password": password}).encode()
    return answer(urllib.request.Request(f"{url}/login", data=form))


def test_configured_credentials_reach_the_secured_cluster(consoles, secured):
    console = consoles["configured"]
    status, _, body = get(console.url + "/")
    assert status == 200, body
    assert f"/topics/{ALLOWED}" in body and f"/topics/{FORBIDDEN}" in body  # admin sees all
    log = console.log.read_text()
    assert f"(cluster {secured.bootstrap}, SASL_PLAINTEXT, PLAIN as admin); Ctrl-C" in log
    for text in (body, log):
        assert USERS["admin"] not in text


def test_without_a_session_every_page_asks_for_a_login(consoles):
    url = consoles["login"].url
    status, headers, _ = get(f"{url}/groups")
    assert (status, headers["location"]) == (303, "/login?next=%2Fgroups")
    # A part of a page reloading itself: htmx is told to load the login page instead.
    status, headers, body = get(f"{url}/", **{"HX-Request": "true"})
    assert (status, headers.get("hx-redirect"), body) == (200, "/login", "")
    # A login posted by another site is refused before the cluster is asked.
    request = urllib.request.Request(
        f"{url}/login", data=f"username=alice&password={USERS['alice']}".encode(),
        headers={"Origin": "http://evil.example"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 403


def test_refused_logins_are_throttled_per_user_without_asking_the_cluster(consoles):
    console = consoles["login"]
    guessed = "guessed-user"
    for n in range(FAILED_LOGIN_LIMITS["user"]):
        status, _, body = post_login(console.url, guessed, f"guess-{n}")
        assert status == 401 and "invalid username or password" in body
    status, headers, body = post_login(console.url, guessed, f"guess-{n + 1}")
    assert status == 429 and "too many failed logins: try again in" in body
    assert 0 < int(headers["retry-after"]) <= FAILED_LOGIN_WINDOW
    log = console.log.read_text()
    assert log.count(f"login of '{guessed}' from 127.0.0.1 refused by the cluster") == \
        FAILED_LOGIN_LIMITS["user"]  # the sixth try never reached the cluster
    assert f"login of '{guessed}' from 127.0.0.1 throttled" in log
    # The address is not locked out by one user's guesses: alice logs in from it.
    status, headers, _ = post_login(console.url, "alice", USERS["alice"])
    assert status == 303 and "databus_console_session=" in headers["set-cookie"]


def log_in(page, url: str, user: str, password: str) -> None:
    page.goto(url)
    page.wait_for_selector("form.login")
    page.fill("#username", user)
    page.fill("#password", password)
    page.click("#login")


def test_login_acts_as_the_user_and_logout_ends_it(page, consoles, browser, secured):
    url = consoles["login"].url
    page.goto(f"{url}/topics/{ALLOWED}")
    assert page.url == f"{url}/login?next=%2Ftopics%2F{ALLOWED}"
    assert page.inner_text("h1") == "Log in" and page.locator("nav").count() == 0
    # A wrong password and an unknown user get the same words.
    for user, password in (("alice", "not-her-password"), ("mallory", USERS["alice"])):
        log_in(page, url, user, password)
        assert page.inner_text("#error") == "invalid username or password"
        assert page.url == f"{url}/login"
    shoot(page, "login")
    log_in(page, f"{url}/login?next=/", "alice", USERS["alice"])
    page.wait_for_selector("#topics")
    assert page.inner_text("#user") == "alice"
    topics = page.inner_text("#topics")
    assert ALLOWED in topics and FORBIDDEN not in topics  # Metadata hides what she may not see
    cookie, = [c for c in browser.cookies(url) if c["name"] == "databus_console_session"]
    assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
    assert page.evaluate("document.cookie") == ""
    # A produce to the topic she may not write: the form of her topic, sent to the other.
    page.goto(f"{url}/topics/{ALLOWED}")
    page.locator("#produce input[name=topic]").evaluate(f"e => e.value = '{FORBIDDEN}'")
    page.fill("#produce textarea[name=value]", "not for alice")
    page.click("#produce button[type=submit]")
    page.click("#confirm")
    page.wait_for_selector("#error")
    assert page.inner_text("#error") == \
        f"producing to '{FORBIDDEN}': TOPIC_AUTHORIZATION_FAILED: topic '{FORBIDDEN}'"
    page.click("#logout")
    page.wait_for_selector("form.login")
    assert page.url == f"{url}/login"
    page.goto(url)  # the old cookie is gone and its session with it
    assert page.url.startswith(f"{url}/login")
    # The refusals are answers (401, 400), not page errors; nothing else went wrong.
    assert [e for e in page.errors if "401" not in e and "400" not in e] == []
    for text in (consoles["login"].log.read_text(), secured.broker.log_text()):
        assert USERS["alice"] not in text


def test_read_only_login_console_refuses_actions(page, consoles):
    url = consoles["read-only"].url
    log_in(page, url, "alice", USERS["alice"])
    page.wait_for_selector("#topics")
    assert page.locator("form:not(.logout)").count() == 0
    status = page.evaluate("""async (topic) => {
        const body = new URLSearchParams({topic, value: "x", confirmed: "yes"});
        return (await fetch("/actions/produce", {method: "POST", body})).status;
    }""", ALLOWED)
    assert status == 403
    assert [e for e in page.errors if "403" not in e] == []


async def test_a_login_sees_only_the_status_rows_of_topics_it_may_describe(consoles, secured,
                                                                          tmp_path):
    # The status page reads index (and mirror) figures with the configuration's
    # credentials (admin here); alice's page keeps only the rows about topics her own
    # Metadata lists.  (The consoles fixture gave her ALLOWED.)
    from databus.config import parse_config
    from databus.console.cluster import ClusterView
    from databus.console.server import ConfigStatus

    config = parse_config({
        "clusters": {"main": {"bootstrap.servers": secured.bootstrap,
                              **secured.settings("admin")}},
        "indexes": {name: {"topics": [topic], "fields": {"id": "id"},
                           "path": str(tmp_path)}
                    for name, topic in (("hers", ALLOWED), ("theirs", FORBIDDEN))}})
    status = ConfigStatus(config, secured.bootstrap)

    async def rows(view) -> dict[str, list[str]]:
        return {t["id"]: [row[0] for row in t["rows"]] for t in await status.tables(view)}

    admin = ClusterView(secured.bootstrap, secured.settings("admin"))
    assert await rows(admin) == {"mirrors": [], "indexes": ["hers", "theirs"],
                                 "sinks": ["index.hers", "index.theirs"]}  # every row
    alice = ClusterView(secured.bootstrap, secured.settings("alice"), user="alice")
    # not even her index's builder: she may not describe its group
    assert await rows(alice) == {"mirrors": [], "indexes": ["hers"], "sinks": []}
