"""The handler table refuses conflicting or invalid declarations, and is the broker's own."""

import pytest

from databus.broker.api import RegistryError, build_table, handles
from databus.broker.handlers import handler_table
from databus.broker.handlers.metadata import metadata


def test_a_second_handler_for_a_key_is_refused():
    @handles(3, 0, 1)
    async def impostor(ctx, request):
        return None

    with pytest.raises(RegistryError, match=r"api key 3 is already handled by "
                                            r"databus\.broker\.handlers\.metadata\.metadata"):
        build_table([metadata, impostor])


def test_a_handler_without_a_declaration_is_refused():
    async def undeclared(ctx, request):
        return None

    with pytest.raises(RegistryError, match="undeclared is not declared with @handles"):
        build_table([undeclared])


@pytest.mark.parametrize(("low", "high"), [(-1, 2), (3, 2)])
def test_invalid_version_ranges_are_refused(low, high):
    with pytest.raises(RegistryError, match="invalid version range"):
        handles(999, low, high)


def test_each_call_builds_a_new_table_sorted_by_key():
    first, second = handler_table(), handler_table()
    assert first == second and first is not second
    assert list(first) == sorted(first)
    assert first[3].handler is metadata and (first[3].min_version, first[3].max_version) == (0, 12)
