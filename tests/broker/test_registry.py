"""The handler registry refuses conflicting or invalid registrations."""

import pytest

from databus.broker.api import RegistryError, handles, load_handlers, lookup


def test_a_second_handler_for_a_key_is_refused():
    load_handlers()
    before = lookup(3)

    async def impostor(ctx, request):
        return None

    with pytest.raises(RegistryError, match="api key 3 is already handled by"):
        handles(3, 0, 1)(impostor)
    assert lookup(3) == before


@pytest.mark.parametrize(("low", "high"), [(-1, 2), (3, 2)])
def test_invalid_version_ranges_are_refused(low, high):
    with pytest.raises(RegistryError, match="invalid version range"):
        handles(999, low, high)
