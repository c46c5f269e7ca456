"""docs/protocol.md lists exactly the APIs and versions the broker registers (and advertises)."""

from databus.broker.protocol_doc import DOC, api_table, current_block


def test_protocol_doc_matches_the_registry():
    block = current_block(DOC.read_text())
    assert block is not None, "docs/protocol.md lost its generated API table"
    assert block == api_table(), (
        "docs/protocol.md is out of date with the handler registry: "
        "run `python -m databus.broker.protocol_doc`"
    )
