"""`mirrors:` and `region:` in sidecar.yaml: what is accepted, and the message for what is not."""

import pytest

from databus.config import ConfigError, load_config, parse_config

CLUSTERS = {
    "east": {"bootstrap.servers": "127.0.0.1:9092", "region": "us-east-1"},
    "west": {"bootstrap.servers": "127.0.0.1:9093", "region": "us-west-2"},
}


def mirror(**fields):
    return {"name": "east-to-west", "source": "east", "target": "west", "topics": ["orders"],
            **fields}


def test_file_with_only_clusters_and_mirrors_is_valid(tmp_path):
    path = tmp_path / "mirror.yaml"
    path.write_text(
        "clusters:\n"
        "  east: {bootstrap.servers: '127.0.0.1:9092', region: us-east-1}\n"
        "  west: {bootstrap.servers: '127.0.0.1:9093', region: us-west-2}\n"
        "mirrors:\n"
        "  - name: east-to-west\n"
        "    source: east\n"
        "    target: west\n"
        "    topics: [orders]\n"
        "    topics.regex: 'audit\\..*'\n"
        "    topics.exclude: ['audit\\.tmp.*']\n"
        "    rename: '{topic}'\n"
        "    start: latest\n"
        "    sync.group.offsets: true\n"
        "    groups.regex: 'billing-.*'\n"
        "    consumer: {fetch.max.bytes: 1048576}\n"
        "    producer: {linger.ms: 20, compression.type: lz4}\n"
    )
    config = load_config(path)
    m = config.mirror("east-to-west")
    assert (m.source, m.target, m.topics, m.topics_regex) == ("east", "west", ["orders"], r"audit\..*")
    assert m.topics_exclude == [r"audit\.tmp.*"] and m.rename == "{topic}" and m.start == "latest"
    assert m.sync_group_offsets and m.groups_regex == "billing-.*"
    assert m.producer == {"linger.ms": 20, "compression.type": "lz4"}
    assert config.clusters["east"].region == "us-east-1"
    # region is a cluster field, not a producer key passed on to the sidecar's producers
    assert config.clusters["east"].producer_settings == {}


def test_defaults():
    m = parse_config({"clusters": CLUSTERS, "mirrors": [mirror()]}).mirrors[0]
    assert m.rename == "{source}.{topic}" and m.start == "earliest"
    assert not m.sync_group_offsets and m.offset_syncs_topic == "databus-mirror-offset-syncs"
    # exactly-once unless said otherwise: decided by the target's transaction support
    assert m.exactly_once is None and m.transaction_boundary_interval_ms == 100
    off = parse_config({"clusters": CLUSTERS, "mirrors": [mirror(**{"exactly.once": False})]})
    assert off.mirrors[0].exactly_once is False


@pytest.mark.parametrize("fields, message", [
    ({"target": "north"}, "target cluster 'north' is not defined in `clusters:` (defined: east, west)"),
    ({"target": "east"}, "source and target are the same cluster"),
    ({"topics": []}, "set `topics` and/or `topics.regex`"),
    ({"rename": "{cluster}.{topic}"}, "unknown field(s) 'cluster'"),
    ({"rename": "{source}"}, "must contain {topic}"),
    ({"topics.regex": "("}, "invalid regex '('"),
    ({"start": "middle"}, "start"),
    ({"name": "a b"}, "mirror name 'a b' may only contain"),
    ({"producer": {"acks": 1}}, "acks must be all"),
    ({"producer": {"enable.idempotence": False}}, "enable.idempotence must stay true"),
    ({"producer": {"transactional.id": "t"}}, "producer: transactional.id is set by the mirror"),
    ({"transaction.boundary.interval.ms": 0}, "transaction.boundary.interval.ms"),
    ({"exactly.once": "sometimes"}, "exactly.once"),
    ({"producer": {"linger.ms": -1}}, "producer: invalid value for 'linger.ms'"),
    ({"consumer": {"group.id": "g"}}, "consumer: group.id is set by the mirror"),
    ({"consumer": {"fetch.mx.bytes": 1}}, "fetch.mx.bytes"),
    ({"topcs": ["x"]}, "topcs: unknown setting"),
])
def test_bad_mirror_is_refused_with_the_reason(fields, message):
    with pytest.raises(ConfigError) as exc:
        parse_config({"clusters": CLUSTERS, "mirrors": [mirror(**fields)]})
    assert message in str(exc.value)


def test_duplicate_names_and_bad_region():
    with pytest.raises(ConfigError, match="two mirrors are named 'east-to-west'"):
        parse_config({"clusters": CLUSTERS, "mirrors": [mirror(), mirror()]})
    with pytest.raises(ConfigError, match="region 'us east' may only contain"):
        parse_config({"clusters": {"east": {"bootstrap.servers": "h:1", "region": "us east"}}})


def test_unknown_mirror_name_lists_the_configured_ones():
    config = parse_config({"clusters": CLUSTERS, "mirrors": [mirror()]})
    with pytest.raises(ConfigError, match=r"no mirror named 'x' \(configured: east-to-west\)"):
        config.mirror("x")
