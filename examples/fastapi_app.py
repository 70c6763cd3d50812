"""delayq in a FastAPI app: close an order automatically if it is not paid in time.

Endpoints::

    POST   /orders              create an order; schedule "order.close" in `pay_within` seconds
    GET    /orders/{id}         the order, and its scheduled close as delayq sees it
    DELETE /orders/{id}/close   cancel the scheduled close (say, the order was paid)

``install_exception_handlers`` answers delayq's errors raised in the routes as delayq's HTTP
API does: bad input 422 naming the field, Redis unreachable 503 with ``Retry-After``.

The queue's own lifespan hands the close handler the orders (``task.state``, typed by
``Task[OrderStore]``), and a middleware logs every attempt.  The queue is opened in the
app's lifespan and closed with it, and an embedded worker
(``async with queue.worker()``) runs the close handler on the app's event loop for as long
as the app runs; leaving the lifespan stops it gracefully.  The close task's id is the
business key ``order-<id>``, so a retried request cannot schedule a second close, and the
task can be found and cancelled without storing anything.

Run the API (``REDIS_URL`` defaults to ``redis://localhost:6379/0``)::

    REDIS_URL=redis://localhost:6379/0 uvicorn examples.fastapi_app:app

To run the handlers in worker processes instead, set ``DELAYQ_EMBEDDED_WORKER=0`` and give
``delayq worker`` a module with ``queue = open_shop(...).queue`` in it.  The orders live
in a dict to keep the example short; with workers elsewhere they would live in your
database.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, status
from pydantic import BaseModel, Field

from delayq import CallNext, Queue, Task, TaskInfo, Topic
from delayq.fastapi import install_exception_handlers

CLOSE_TOPIC = "order.close"
log = logging.getLogger("shop")


class OrderIn(BaseModel):
    """A new order, and how long the customer has to pay for it."""

    item: str = Field(min_length=1, max_length=200)
    pay_within: float = Field(default=900.0, gt=0, le=7 * 24 * 3600)
    """Seconds until an unpaid order is closed."""


class Order(BaseModel):
    """An order as the API shows it."""

    id: int
    item: str
    status: Literal["pending", "paid", "closed"]


class OrderView(BaseModel):
    """An order with its scheduled close (``None`` once it ran or was cancelled)."""

    order: Order
    close: TaskInfo | None


class CloseOrder(BaseModel):
    """The body of an ``order.close`` task."""

    order_id: int


class Cancelled(BaseModel):
    """The answer of ``DELETE /orders/{id}/close``."""

    cancelled: bool


@dataclass
class OrderStore:
    """The orders, as the lifespan hands them to the handlers (``task.state``)."""

    orders: dict[int, Order]

    def close(self, order_id: int) -> None:
        """Close a pending order (a paid or closed one stays as it is)."""
        order = self.orders.get(order_id)
        if order is not None and order.status == "pending":
            self.orders[order_id] = order.model_copy(update={"status": "closed"})


@dataclass
class Shop:
    """What the routes need: the queue, the typed topic handle, and the orders."""

    queue: Queue
    close_order: Topic[CloseOrder]
    orders: dict[int, Order] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))


def close_task_id(order_id: int) -> str:
    """The close task's id: the business key, so the task needs no bookkeeping."""
    return f"order-{order_id}"


def open_shop(redis_url: str, queue_name: str) -> Shop:
    """Open the queue and register the ``order.close`` handler on it."""
    queue = Queue.from_url(redis_url, name=queue_name)
    orders: dict[int, Order] = {}

    @queue.lifespan
    async def store() -> AsyncIterator[OrderStore]:
        """What handlers share, as ``task.state``: here the orders; in a real service a
        database pool, opened once per worker and closed when it stops."""
        yield OrderStore(orders)

    @queue.middleware
    async def log_task(task: Task, call_next: CallNext) -> None:
        """Around every handler: a log line per attempt."""
        log.info("%s/%s attempt %d", task.topic, task.id, task.attempt)
        await call_next()

    @queue.topic(CLOSE_TOPIC, ttr=30, max_attempts=5)
    async def close_order(body: CloseOrder, task: Task[OrderStore]) -> None:
        """Close the order unless it was paid meanwhile.

        Delivery is at least once, so this must be safe to run twice: closing a closed
        order changes nothing.  ``task.state`` is typed by ``Task[OrderStore]``.
        """
        task.state.close(body.order_id)

    return Shop(queue=queue, close_order=close_order, orders=orders)


def get_shop(request: Request) -> Shop:
    """The shop opened by the lifespan."""
    shop: Shop = request.app.state.shop
    return shop


ShopDep = Annotated[Shop, Depends(get_shop)]
router = APIRouter()


@router.post("/orders", status_code=status.HTTP_201_CREATED)
async def create_order(new: OrderIn, shop: ShopDep) -> Order:
    """Create an order and schedule its close."""
    order = Order(id=next(shop.ids), item=new.item, status="pending")
    # The close is scheduled first: if Redis is unreachable (503), no order is left
    # without its close.
    await shop.close_order.send_delayed(
        CloseOrder(order_id=order.id), new.pay_within, task_id=close_task_id(order.id)
    )
    shop.orders[order.id] = order
    return order


@router.get("/orders/{order_id}")
async def show_order(order_id: int, shop: ShopDep) -> OrderView:
    """The order and its pending close, if any."""
    order = shop.orders.get(order_id)
    if order is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no order {order_id}")
    close = await shop.queue.get(CLOSE_TOPIC, close_task_id(order_id))
    return OrderView(order=order, close=close)


@router.delete("/orders/{order_id}/close")
async def cancel_close(order_id: int, shop: ShopDep) -> Cancelled:
    """Cancel the scheduled close: the order was paid.

    Answers 409 when the close is already running or done: a running task cannot be
    recalled, so the caller must not assume the order stays open.
    """
    order = shop.orders.get(order_id)
    if order is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no order {order_id}")
    if not await shop.queue.cancel(CLOSE_TOPIC, close_task_id(order_id)):
        raise HTTPException(status.HTTP_409_CONFLICT, "the close already ran or is running")
    shop.orders[order_id] = order.model_copy(update={"status": "paid"})
    return Cancelled(cancelled=True)


def create_app(
    redis_url: str | None = None,
    queue_name: str | None = None,
    *,
    embedded_worker: bool | None = None,
) -> FastAPI:
    """The app; ``REDIS_URL``, ``DELAYQ_QUEUE`` and ``DELAYQ_EMBEDDED_WORKER`` (default 1)
    are read at startup when not given."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        url = redis_url or os.environ.get("REDIS_URL", "redis://localhost:6379/0")
        name = queue_name or os.environ.get("DELAYQ_QUEUE", "shop")
        embedded = embedded_worker
        if embedded is None:
            embedded = os.environ.get("DELAYQ_EMBEDDED_WORKER", "1") != "0"
        shop = open_shop(url, name)
        app.state.shop = shop
        try:
            if embedded:
                async with shop.queue.worker(concurrency=20, grace=10):
                    yield
            else:
                yield
        finally:
            await shop.queue.close()

    app = FastAPI(title="delayq shop example", lifespan=lifespan)
    install_exception_handlers(app)
    app.include_router(router)
    return app


app = create_app()
