"""The writes of OpenAI's vector-store surface (:mod:`vectors.services`), without HTTP."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from accounts.models import Organization, Project
from vectors import selectors, services
from vectors.files import file_create
from vectors.models import Collection, FileStatus, StoredFile, VectorItem
from vectors.store import Item

pytestmark = pytest.mark.django_db


@pytest.fixture
def project(make_org: Callable[..., Organization]) -> Project:
    org = make_org()
    found, _ = Project.objects.get_or_create(organization_id=org.pk, name="default")
    return found


def _collection(project: Project) -> Collection:
    return services.collection_create(
        organization_id=project.organization_id, project_id=project.pk, name=None
    )


def _file(project: Project) -> StoredFile:
    return file_create(
        organization_id=project.organization_id,
        project_id=project.pk,
        filename="notes.txt",
        purpose="assistants",
        content=b"some notes",
    )


def test_the_first_embedding_model_pinned_stays(project: Project) -> None:
    collection = _collection(project)
    services.embedding_model_pin(collection=collection, model="")
    collection.refresh_from_db()
    assert collection.embedding_model == ""

    stale = Collection.objects.get(pk=collection.pk)  # read before the pin below
    services.embedding_model_pin(collection=collection, model="model-a")
    services.embedding_model_pin(collection=stale, model="model-b")
    collection.refresh_from_db()
    assert collection.embedding_model == "model-a"


def test_a_collection_update_changes_only_what_is_given(project: Project) -> None:
    collection = _collection(project)
    services.collection_update(collection=collection, title="x" * 300, metadata={"a": "1"})
    services.collection_update(collection=collection, title=None, metadata=None)
    collection.refresh_from_db()
    assert collection.title == "x" * 256 and collection.metadata == {"a": "1"}


def test_a_file_link_goes_in_progress_then_failed_then_completed_then_away(
    project: Project,
) -> None:
    collection, stored = _collection(project), _file(project)
    link = services.store_file_begin(
        collection=collection, stored=stored, attributes={"team": "hr"}, max_tokens=100, overlap=0
    )
    assert link.status == FileStatus.IN_PROGRESS and link.attributes == {"team": "hr"}
    services.store_file_fail(link=link, message="The file holds no text.")
    assert selectors.store_file_counts(collection=collection)["failed"] == 1

    again = services.store_file_begin(
        collection=collection, stored=stored, attributes={}, max_tokens=200, overlap=50
    )
    assert again.pk == link.pk and again.last_error is None
    assert again.chunking == {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 50}
    meta = {services.FILE_ID: stored.public_id}
    items = [
        Item(id=f"{stored.public_id}#{n}", vector=[1.0, float(n)], metadata=meta) for n in (0, 1)
    ]
    services.store_file_complete(
        collection=collection,
        link=again,
        file_id=stored.public_id,
        items=items,
        embedding_model="model-a",
    )
    found = selectors.store_file_find(collection=collection, file_id=stored.public_id)
    assert found.status == FileStatus.COMPLETED and found.chunks == 2 and found.usage_bytes > 8
    collection.refresh_from_db()
    assert collection.embedding_model == "model-a" and collection.vector_count == 2

    services.store_file_delete(collection=collection, link=found)
    assert not VectorItem.objects.filter(collection=collection).exists()
    assert selectors.store_files_of(collection=collection) == []
    assert StoredFile.objects.filter(pk=stored.pk).exists()  # the file itself stays
