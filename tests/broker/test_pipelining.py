"""Pipelined requests on one connection are answered in order (librdkafka relies on it),
acks=0 produces are not answered at all, and acks=all answers wait their turn."""

from __future__ import annotations

import datetime

from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode
from databus.protocol.framing import decode_response, encode_request
from databus.protocol.records import build_batch

from .test_api_versions import make, metadata, req
from .wire import WireClient

MS = datetime.timedelta(milliseconds=1)


def produce_request(topic: str, acks: int, tag: bytes):
    mod = req(0, 8)
    return make(0, 8, acks=acks, timeout=5000 * MS, transactional_id=None, topic_data=(
        build(mod.TopicProduceData, name=topic, partition_data=(
            build(mod.PartitionProduceData, index=0,
                  records=build_batch([(None, tag, (), 1)])),)),))


def test_pipelined_mix_is_answered_in_request_order(broker):
    with WireClient(broker.bootstrap) as client:
        metadata(client, ["pipe"])
        requests = []
        for i in range(30):
            kind = ("all", "versions", "zero", "one", "metadata")[i % 5]
            if kind == "all":
                body = produce_request("pipe", -1, b"all%d" % i)
            elif kind == "one":
                body = produce_request("pipe", 1, b"one%d" % i)
            elif kind == "zero":
                body = produce_request("pipe", 0, b"zero%d" % i)
            elif kind == "versions":
                body = make(18, 3, client_software_name="p", client_software_version="1")
            else:
                body = make(3, 9, topics=None, allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False,
                            include_cluster_authorized_operations=False)
            requests.append((1000 + i, kind, body))
        # everything is written before anything is read
        client.send_raw(b"".join(encode_request(body, cid, "pipe") for cid, _, body in requests))
        expected = [(cid, body) for cid, kind, body in requests if kind != "zero"]
        offsets = []
        for cid, body in expected:
            got, response = decode_response(client.read_frame(), body.__api_key__,
                                            body.__version__)
            assert got == cid
            if body.__api_key__ == 0:
                part = response.responses[0].partition_responses[0]
                assert part.error_code == ErrorCode.none
                offsets.append(part.base_offset)
        # 30 requests, 24 produces (6 of them acks=0): offsets in request order, 0..23
        produced = [i for i in range(30) if i % 5 in (0, 2, 3)]
        assert offsets == [produced.index(i) for i in range(30) if i % 5 in (0, 3)]
