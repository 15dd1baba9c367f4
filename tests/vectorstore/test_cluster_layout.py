"""The Qdrant cluster layout: settings reach the create-collection call and the search parameters.

No server is needed for the parameters: a recording client stands in for
``QdrantClient`` behind the store built by ``open_store`` from settings.  The
last test creates a real collection on a server and reads its configuration
back; it skips unless ``QDRANT_URL`` is set.
"""

from __future__ import annotations

import os
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from qdrant_client import models as qm

from freshindex.core.errors import ConfigError
from freshindex.settings import load_settings
from freshindex.settings.model import CLUSTER_PRESETS
from freshindex.vectorstore import DENSE, LEXICAL, open_store
from freshindex.vectorstore.qdrant import QdrantStore
from freshindex.vectorstore.qdrant_layout import CollectionLayout, collection_params, search_params


class RecordingClient:
    """The calls the store makes, with their arguments; answers what create and search need."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def collection_exists(self, name: str) -> bool:
        return False

    def create_collection(self, **kwargs: Any) -> bool:
        self.calls.append(("create_collection", kwargs))
        return True

    def create_payload_index(self, name: str, field: str, schema: Any) -> None:
        self.calls.append(("create_payload_index", {"field": field, "schema": schema}))

    def query_points(self, name: str, **kwargs: Any) -> Any:
        self.calls.append(("query_points", kwargs))
        return SimpleNamespace(points=[])

    def close(self) -> None:
        pass


def _server_store(monkeypatch: pytest.MonkeyPatch, **cluster: Any) -> tuple[QdrantStore, RecordingClient]:
    for key, value in cluster.items():
        monkeypatch.setenv(f"FRESHINDEX_VECTOR_STORE__CLUSTER__{key.upper()}", str(value))
    vs = load_settings().vector_store
    store = open_store("server", url="http://127.0.0.1:1", layout=vs.cluster.resolved())
    assert isinstance(store, QdrantStore)
    client = RecordingClient()
    store.client = client  # type: ignore[assignment]
    return store, client


def test_the_100m_preset_reaches_create_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    store, client = _server_store(monkeypatch, size="100m")
    store.create_collection("fi_kb-v1", 384)

    name, kwargs = client.calls[0]
    assert name == "create_collection" and kwargs["collection_name"] == "fi_kb-v1"
    assert (kwargs["shard_number"], kwargs["replication_factor"], kwargs["write_consistency_factor"]) == (12, 2, 2)
    assert kwargs["on_disk_payload"] is True
    dense = kwargs["vectors_config"][DENSE]
    assert dense.size == 384 and dense.on_disk is True and dense.distance == qm.Distance.COSINE
    assert kwargs["sparse_vectors_config"][LEXICAL].index.on_disk is True
    scalar = kwargs["quantization_config"].scalar
    assert scalar.type == qm.ScalarType.INT8 and scalar.always_ram is True
    # the tenant field gets Qdrant's tenant index (co-locates a tenant's points)
    tenant = [c for n, c in client.calls if n == "create_payload_index" and c["field"] == "tenant"]
    assert tenant and tenant[0]["schema"].is_tenant is True


def test_an_explicit_field_wins_over_the_preset(monkeypatch: pytest.MonkeyPatch) -> None:
    store, client = _server_store(monkeypatch, size="10m", shard_number=6, quantization="none")
    store.create_collection("fi_kb-v1", 384)

    kwargs = client.calls[0][1]
    assert kwargs["shard_number"] == 6 and kwargs["replication_factor"] == CLUSTER_PRESETS["10m"]["replication_factor"]
    assert kwargs["quantization_config"] is None


def test_the_default_is_one_node_without_quantization(monkeypatch: pytest.MonkeyPatch) -> None:
    store, client = _server_store(monkeypatch)
    store.create_collection("fi_kb-v1", 8)

    kwargs = client.calls[0][1]
    assert (kwargs["shard_number"], kwargs["replication_factor"], kwargs["write_consistency_factor"]) == (1, 1, 1)
    assert kwargs["quantization_config"] is None and kwargs["vectors_config"][DENSE].on_disk is False


def test_a_quantized_collection_is_searched_with_rescoring(monkeypatch: pytest.MonkeyPatch) -> None:
    store, client = _server_store(monkeypatch, size="100m")
    store.search("fi_kb", [0.1] * 4, limit=5)

    params = client.calls[-1][1]["search_params"]
    assert params.quantization.rescore is True and params.quantization.oversampling == 2.0
    assert params.exact is not True


def test_exact_search_and_unquantized_layouts() -> None:
    quantized = CollectionLayout(quantization="int8", oversampling=1.5)
    assert search_params(quantized, exact=True).exact is True
    assert search_params(CollectionLayout(), exact=False) is None
    assert search_params(quantized, exact=False).quantization.oversampling == 1.5


def test_local_mode_ignores_the_cluster_layout() -> None:
    client = RecordingClient()
    store = QdrantStore(client, local=True, layout=CollectionLayout(shard_number=12, quantization="int8"))  # type: ignore[arg-type]
    store.create_collection("fi_kb-v1", 8)

    assert set(client.calls[0][1]) == {"collection_name", "vectors_config", "sparse_vectors_config"}


def test_write_consistency_cannot_exceed_the_replicas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRESHINDEX_VECTOR_STORE__CLUSTER__SIZE", "10m")
    monkeypatch.setenv("FRESHINDEX_VECTOR_STORE__CLUSTER__WRITE_CONSISTENCY_FACTOR", "3")
    with pytest.raises(ConfigError, match="write_consistency_factor"):
        load_settings().vector_store.cluster.resolved()


def test_every_preset_builds_valid_parameters() -> None:
    for size, preset in CLUSTER_PRESETS.items():
        params = collection_params(CollectionLayout(**preset), 384)
        assert params["shard_number"] == preset["shard_number"], size
        assert (params["quantization_config"] is None) == (preset["quantization"] == "none"), size


@pytest.mark.skipif(not os.environ.get("QDRANT_URL"), reason="needs a Qdrant server: set QDRANT_URL")
def test_a_server_collection_has_the_configured_layout() -> None:
    layout = CollectionLayout(shard_number=2, on_disk_vectors=True, quantization="int8")
    store = open_store("server", url=os.environ["QDRANT_URL"], layout=layout.__dict__)
    name = f"fi_layout_{uuid.uuid4().hex[:8]}"
    try:
        store.create_collection(name, 8)
        info = store.client.get_collection(name)  # type: ignore[attr-defined]
        assert info.config.params.shard_number == 2
        assert info.config.params.vectors[DENSE].on_disk is True
        assert info.config.quantization_config.scalar.type == qm.ScalarType.INT8
    finally:
        store.drop_collection(name)
        store.close()
