"""Length fields are checked against the frame before kio decodes it (protocol/bounds.py)."""

from __future__ import annotations

import datetime
import struct

import pytest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from databus.protocol.framing import FramingError, decode_request, encode_request


def test_a_count_near_2_32_is_refused_before_kio_allocates_for_it():
    # Metadata v12, topics = compact array of 0xFFFFFFFF - 1 elements in a 27-byte frame:
    # handed to kio, the process aborts ("memory allocation of 31341792512 bytes failed")
    frame = struct.pack(">hhih", 3, 12, 1, 1) + b"x\0" + b"\xff\xff\xff\xff\x0f" + b"\0" * 10
    with pytest.raises(FramingError, match="cannot decode api key 3 v12: an array of "
                       "4294967294 claimed, only 10 bytes remain"):
        decode_request(frame)


def test_a_legacy_string_length_past_the_end_is_refused():
    frame = struct.pack(">hhih", 3, 1, 1, -1) + b"\0\0\0\x01" + b"\x7f\xff"
    with pytest.raises(FramingError, match="a string length of 32767 claimed, only 0 bytes"):
        decode_request(frame)


@pytest.mark.parametrize("request_body", [
    MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="t"),),
                    allow_auto_topic_creation=True, include_topic_authorized_operations=False),
    ProduceRequest(transactional_id="tx", acks=-1, timeout=datetime.timedelta(seconds=1),
                   topic_data=(TopicProduceData(name="t", partition_data=(
                       PartitionProduceData(index=0, records=b"\xff" * 300),
                       PartitionProduceData(index=1, records=None))),)),
])
def test_well_formed_requests_pass(request_body):
    header, decoded = decode_request(encode_request(request_body, 5, "c")[4:])
    assert decoded == request_body
