"""TopicPartition: one definition, interchangeable with the (topic, partition) tuples callers build."""

import databus.client
from databus.client.subscription import SubscriptionState
from databus.protocol.types import TopicPartition


def test_topic_partition_is_the_tuple_it_names():
    tp = TopicPartition("orders", 3)
    assert (tp.topic, tp.partition) == ("orders", 3)
    assert tp == ("orders", 3) and hash(tp) == hash(("orders", 3))
    assert {("orders", 3): "x"}[tp] == "x"
    topic, partition = tp
    assert (topic, partition) == ("orders", 3)


def test_client_exports_the_one_definition():
    assert databus.client.TopicPartition is TopicPartition
    assert "TopicPartition" in databus.client.__all__


def test_named_and_plain_tuples_are_the_same_partition_to_the_consumer():
    state = SubscriptionState()
    state.assign_manually([TopicPartition("orders", 0), ("orders", 1)])
    state.seek(("orders", 0), 5)
    state.seek(TopicPartition("orders", 1), 7)
    assert state.assigned() == {("orders", 0), TopicPartition("orders", 1)}
    assert state.positions() == {TopicPartition("orders", 0): 5, ("orders", 1): 7}
