"""A CreateTopics is answered once its new image is in effect: a listener (the shard,
installing the image one offsets partition per loop turn) may return what completes then,
and the answer waits for it -- so the caller's next request sees the topic (issue 36 item 9).
"""

from __future__ import annotations

import asyncio

from shards.core import api
from shards.core.topics import TopicsImage
from shards.storage.memory import InMemoryLogStore
from shards.topic_catalog import TopicCatalog


async def test_create_topics_is_answered_once_the_listeners_installed_the_image() -> None:
    store = InMemoryLogStore()
    await store.start()
    catalog = TopicCatalog(store)
    await catalog.start()
    installed = asyncio.get_running_loop().create_future()
    seen: list[TopicsImage] = []

    def listener(image: TopicsImage) -> asyncio.Future[None]:
        seen.append(image)
        return installed

    catalog.listeners.append(listener)
    try:
        answer = asyncio.ensure_future(
            catalog.create_topics(api.CreateTopicsRequest(topics=(api.CreatableTopic("t", 3),)))
        )
        for _ in range(20):
            await asyncio.sleep(0)
        assert [sorted(i.by_name) for i in seen] == [["t"]]
        assert not answer.done()  # the image is not in effect yet
        installed.set_result(None)
        assert (await answer).topics[0].error_code == 0
    finally:
        await catalog.close()
