"""The marketplace HTTP API: parse input, call one service, shape the answer.

Auth: the gateway middleware authenticates every request. The catalogue: reads need any API
key (``PrincipalDep``), changes an admin key (``WriterDep``). Users, chat and conversations
need a key that acts for users (``AppDep``: ``APP_API_KEYS`` or ``ADMIN_API_KEYS``; a read key
gets 403), or, for a user's own profile, conversations and chat, an end-user token
(``UserDataDep``, ``marketplace.tokens``). Each user and conversation belongs to the key that
created it; whatever a caller may not see is a 404 (``marketplace.access``).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request, Response, status

from gateway.api import AppDep, PrincipalDep, UserDataDep, WriterDep, request_id
from marketplace import ai_search as ai_search_service
from marketplace import catalog, chat, conversations, taxonomy, tokens, users
from marketplace.cursor import MAX_CHARS as CURSOR_MAX_CHARS
from marketplace.errors import invalid_field
from marketplace.lifecycle import DatabaseRoute, MarketplaceDep, SessionDep
from marketplace.listing import (
    compare_offers,
    hit_out,
    refuse_nul,
    run_search,
    search_criteria_from_query,
)
from marketplace.schemas import (
    MAX_ID,
    PAGE_LIMIT_MAX,
    PLACE_QUERY_MAX,
    PLACES_LIMIT_MAX,
    PRICE_MAX,
    QUERY_MAX,
    SEARCH_OFFSET_MAX,
    AISearchOut,
    AISearchRequest,
    CategoryTree,
    ChatOut,
    ChatRequest,
    CompareOut,
    ConversationOut,
    MessageOut,
    PlaceOut,
    PlacesOut,
    ProductCreate,
    ProductOut,
    ProductPage,
    ProductUpdate,
    SearchOut,
    SupplierCreate,
    SupplierOut,
    TokenCreate,
    TokenOut,
    UserCreate,
    UserOut,
    UserUpdate,
)
from marketplace.streaming import stream_chat

router = APIRouter(prefix="/api", tags=["marketplace"], route_class=DatabaseRoute)  # outages: 503

Id = Annotated[int, Path(ge=1, le=MAX_ID)]
PublicId = Annotated[uuid.UUID, Path(description="a UUID")]
Limit = Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX)]
Offset = Annotated[int, Query(ge=0, le=10**9)]
SearchOffset = Annotated[int, Query(ge=0, le=SEARCH_OFFSET_MAX)]


# --- categories, suppliers and products ------------------------------------------------


@router.get("/categories")
async def list_categories(_: PrincipalDep) -> CategoryTree:
    """The category tree: what ``category`` may name when adding a product or filtering a search."""
    return CategoryTree(categories=taxonomy.tree())


@router.post("/suppliers/register", status_code=status.HTTP_201_CREATED)
async def register_supplier(body: SupplierCreate, _: WriterDep, session: SessionDep) -> SupplierOut:
    return SupplierOut.of(await catalog.register_supplier(session=session, data=body))


@router.get("/suppliers/{supplier_id}")
async def get_supplier(supplier_id: Id, _: PrincipalDep, session: SessionDep) -> SupplierOut:
    return SupplierOut.of(await catalog.get_supplier(session=session, supplier_id=supplier_id))


@router.get("/suppliers/{supplier_id}/products")
async def list_supplier_products(
    supplier_id: Id, _: PrincipalDep, session: SessionDep, limit: Limit = 50, offset: Offset = 0
) -> ProductPage:
    total, products = await catalog.list_supplier_products(
        session=session, supplier_id=supplier_id, limit=limit, offset=offset
    )
    return ProductPage(
        supplier_id=supplier_id, total=total, limit=limit, offset=offset,
        products=[ProductOut.of(p) for p in products],
    )


@router.post("/products", status_code=status.HTTP_201_CREATED)
async def create_product(body: ProductCreate, _: WriterDep, session: SessionDep) -> ProductOut:
    return ProductOut.of(await catalog.create_product(session=session, data=body))


@router.get("/products/search")
async def search_products(
    _: PrincipalDep,
    session: SessionDep,
    mp: MarketplaceDep,
    q: Annotated[str, Query(max_length=QUERY_MAX)] = "",
    location: Annotated[str | None, Query(max_length=100, description="lat,lng")] = None,
    radius_km: Annotated[float | None, Query(gt=0, le=20_000)] = None,
    min_price: Annotated[int | None, Query(ge=0, le=PRICE_MAX)] = None,
    max_price: Annotated[int | None, Query(ge=0, le=PRICE_MAX)] = None,
    category: Annotated[str | None, Query(max_length=64)] = None,
    in_stock: bool = False,
    limit: Limit = 20,
    offset: SearchOffset = 0,
    sort: Literal["nearest", "price_asc", "price_desc"] = "nearest",
    fallback: bool = True,
    cursor: Annotated[str | None, Query(min_length=1, max_length=CURSOR_MAX_CHARS,
                                        description="next_cursor of the previous page (instead of offset)")] = None,
) -> SearchOut:
    """Keyword search; nearest first when ``location`` is given. ``fallback=false`` disables relaxing."""
    criteria = search_criteria_from_query(
        q=q, location=location, radius_km=radius_km, min_price=min_price, max_price=max_price,
        category=category, in_stock=in_stock, limit=limit, offset=offset, sort=sort,
    )
    return await run_search(session=session, signer=mp.cursors, criteria=criteria, fallback=fallback, cursor=cursor)


@router.post("/products/ai-search")
async def ai_search(
    body: AISearchRequest, _: PrincipalDep, session: SessionDep, mp: MarketplaceDep, request: Request
) -> AISearchOut:
    """Natural-language search: the rules and the engine read the query into filters, searched like /search."""
    return await ai_search_service.run(
        session=session, signer=mp.cursors, gateway=mp.gateway, settings=mp.settings,
        gazetteer=mp.gazetteer, body=body, request_id=request_id(request),
    )


@router.get("/products/compare")
async def compare(
    _: PrincipalDep,
    session: SessionDep,
    name: Annotated[str, Query(min_length=1, max_length=200)],
    location: Annotated[str | None, Query(max_length=100, description="lat,lng")] = None,
    in_stock: bool = True,
    sort: Literal["price", "distance"] = "price",
    limit: Limit = 20,
) -> CompareOut:
    """Each supplier's cheapest offer for a product name: cheapest first, or nearest first."""
    return await compare_offers(
        session=session, name=name, location=location, in_stock=in_stock, limit=limit, sort=sort
    )


@router.get("/products/{product_id}")
async def get_product(product_id: Id, _: PrincipalDep, session: SessionDep) -> ProductOut:
    return ProductOut.of(await catalog.get_product(session=session, product_id=product_id))


@router.put("/products/{product_id}")
async def update_product(product_id: Id, body: ProductUpdate, _: WriterDep, session: SessionDep) -> ProductOut:
    return ProductOut.of(await catalog.update_product(session=session, product_id=product_id, changes=body))


# --- users, chat, conversations -----------------------------------------------------------


@router.post("/users", status_code=status.HTTP_201_CREATED)
async def create_user(body: UserCreate, caller: AppDep, session: SessionDep) -> UserOut:
    """Register a user, owned by the calling key."""
    return UserOut.of(await users.create_user(session=session, data=body, owner=caller))


@router.get("/users/{user_id}")
async def get_user(user_id: PublicId, caller: UserDataDep, session: SessionDep) -> UserOut:
    """A user of the calling key, or an end-user token's own profile."""
    return UserOut.of(await users.get_user(session=session, user_id=str(user_id), principal=caller))


@router.patch("/users/{user_id}")
async def update_user(user_id: PublicId, body: UserUpdate, caller: AppDep, session: SessionDep) -> UserOut:
    return UserOut.of(await users.update_user(session=session, user_id=str(user_id), principal=caller, changes=body))


@router.post("/users/{user_id}/tokens", status_code=status.HTTP_201_CREATED)
async def mint_token(
    user_id: PublicId, caller: AppDep, session: SessionDep, body: TokenCreate | None = None
) -> TokenOut:
    """A short-lived token for this user's own client (browser, app): its profile, conversations and chat."""
    user = await users.get_user(session=session, user_id=str(user_id), principal=caller)
    row, token = await tokens.mint(session=session, user=user, issued_by=caller,
                                   ttl_seconds=(body or TokenCreate()).ttl_seconds)
    return TokenOut(token_id=row.id, token=token, user_id=user.public_id, expires_at=row.expires_at)


@router.delete("/users/{user_id}/tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT)
async def revoke_token(user_id: PublicId, token_id: PublicId, caller: AppDep, session: SessionDep) -> None:
    user = await users.get_user(session=session, user_id=str(user_id), principal=caller)
    await tokens.revoke(session=session, user=user, token_id=str(token_id))


@router.delete("/users/{user_id}/tokens", status_code=status.HTTP_204_NO_CONTENT)
async def revoke_all_tokens(user_id: PublicId, caller: AppDep, session: SessionDep) -> None:
    """Revoke every token of this user (a lost phone, a password change in the application)."""
    user = await users.get_user(session=session, user_id=str(user_id), principal=caller)
    await tokens.revoke(session=session, user=user, token_id=None)


@router.post("/chat", response_model=ChatOut)
async def chat_message(
    body: ChatRequest, caller: UserDataDep, request: Request, mp: MarketplaceDep
) -> Response | ChatOut:
    """Answer a user's question from nearby in-stock products; ``stream: true`` answers with SSE."""
    gateway = mp.gateway
    options = dict(
        session_factory=mp.database(),
        gazetteer=mp.gazetteer,
        request=body,
        principal=caller,
        model=gateway.default_model,
        max_tokens=gateway.settings.default_max_tokens,
        temperature=gateway.settings.default_temperature,
    )
    if body.stream:
        return await stream_chat(gateway=gateway, http_request=request, **options)
    outcome = await chat.chat(upstream=gateway, request_id=request_id(request), **options)
    return ChatOut(
        answer=outcome.answer.text,
        products=[hit_out(hit) for hit in outcome.plan.hits],
        conversation_id=outcome.conversation_id,
        session_id=outcome.plan.session_id,
        parsed=outcome.plan.parsed,
        fallback=outcome.plan.fallback,
        finish_reason=outcome.answer.finish_reason,
        usage=outcome.answer.usage,
    )


@router.get("/conversations/{conversation_id}")
async def get_conversation(conversation_id: PublicId, caller: UserDataDep, session: SessionDep) -> ConversationOut:
    conversation = await conversations.get_conversation(session=session, conversation_id=str(conversation_id),
                                                        principal=caller)
    return ConversationOut(
        id=conversation.public_id,
        user_id=conversation.user.public_id,
        session_id=conversation.session_id,
        created_at=conversation.created_at,
        messages=[
            MessageOut(id=m.id, role=m.role, content=m.content, timestamp=m.timestamp, details=m.details)
            for m in conversation.messages
        ],
    )


# --- places ----------------------------------------------------------------------------------


@router.get("/places")
async def find_places(
    _: PrincipalDep,
    mp: MarketplaceDep,
    q: Annotated[str, Query(max_length=PLACE_QUERY_MAX, description="the start of a place name")],
    limit: Annotated[int, Query(ge=1, le=PLACES_LIMIT_MAX)] = 10,
) -> PlacesOut:
    """Places of the offline gazetteer whose names match what was typed so far, best match first."""
    refuse_nul(q=q)
    if not q.strip():
        raise invalid_field("query", "q", "q must not be blank")
    return PlacesOut(places=[PlaceOut.of(place) for place in mp.gazetteer.suggest(q, limit=limit)])
