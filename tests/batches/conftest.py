"""The fake vendors and the SDK client of the inference tests, for the Batch API's; the vector
store's price (uploads are metered writes) put back before each test."""

import pytest

from tests.inference.conftest import (  # noqa: F401  (fixtures)
    _fake_servers,
    client_for,
    fake_catalog,
    fakes,
)
from tests.vectors.conftest import reseed_vector_price


@pytest.fixture(autouse=True)
def _priced(transactional_db: None) -> None:
    reseed_vector_price()
