// The marketplace tab: natural-language search (POST /api/products/ai-search), a place picker
// (GET /api/places, or the browser's location), and the grounded assistant (POST /api/chat)
// with the products it was given listed beside its answer.

import { ApiError, requestJson } from "./api.js";
import { byId, clear, el, setStatus } from "./dom.js";
import { idr, km, numberField } from "./format.js";
import { readText, writeText } from "./storage.js";

const USER_KEY = "stack-playground.market-user";
// Marketplace users are known by random UUIDs (an id of an older page, a row number, is dropped).
const USER_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const SUGGESTIONS = 8;
const relaxations = {
  matched_any_term: "matched any one word",
  widened_radius: "widened the radius",
  dropped_terms: "dropped the words",
};

export function initMarket() {
  const form = byId("market-form");
  const query = byId("market-query");
  const placeInput = byId("market-place");
  const options = byId("market-place-options");
  const chosenLine = byId("market-place-chosen");
  const geolocate = byId("market-geolocate");
  const clearPlace = byId("market-place-clear");
  const inStock = byId("market-in-stock");
  const limit = byId("market-limit");
  const userId = byId("market-user");
  const askButton = byId("market-ask");
  const createUser = byId("market-create-user");
  const status = byId("market-status");
  const chips = byId("market-chips");
  const summary = byId("market-summary");
  const results = byId("market-results");
  const answer = byId("market-answer");
  const given = byId("market-given");

  let chosen = null;  // {label, lat, lng, from: "gazetteer" | "browser"}
  const suggested = new Map();  // option label -> place
  let typing = null;

  const savedUser = readText("local", USER_KEY);
  if (savedUser && USER_ID.test(savedUser)) userId.value = savedUser;

  // --- the place picker -----------------------------------------------------------------

  const labelOf = (place) => (place.admin1 ? `${place.name}, ${place.admin1}` : place.name);

  function choose(place) {
    chosen = place;
    if (!place) {
      placeInput.value = "";
      chosenLine.textContent = "No place chosen: a place named in the search is used, else results are not ordered by distance.";
    } else {
      const where = `${place.lat.toFixed(4)}, ${place.lng.toFixed(4)}`;
      chosenLine.textContent = place.from === "browser"
        ? `Your location (${where}): results nearest to it first.`
        : `${place.label} (${where}): results nearest to it first.`;
    }
    chosenLine.dataset.place = place ? place.label : "";
  }

  async function suggest(text) {
    const { data } = await requestJson(`/api/places?${new URLSearchParams({ q: text, limit: SUGGESTIONS })}`);
    suggested.clear();
    clear(options);
    for (const place of data.places) {
      const label = labelOf(place);
      suggested.set(label, { label, lat: place.lat, lng: place.lng, from: "gazetteer" });
      options.append(el("option", { value: label }));
    }
    return data.places;
  }

  placeInput.addEventListener("input", () => {
    const text = placeInput.value.trim();
    if (suggested.has(placeInput.value)) {
      choose(suggested.get(placeInput.value));
      return;
    }
    clearTimeout(typing);
    if (text.length < 2) return;
    typing = setTimeout(() => suggest(text).catch((error) => setStatus(status, error.message, { error: true })), 150);
  });

  // Leaving the field (or Enter) settles the place: a suggestion as typed, else the best match.
  async function settlePlace() {
    clearTimeout(typing);
    const text = placeInput.value.trim();
    if (!text) return chosen?.from === "browser" ? undefined : choose(null);  // the field is empty for a location
    if (suggested.has(placeInput.value)) return choose(suggested.get(placeInput.value));
    if (chosen && chosen.label === placeInput.value) return undefined;
    try {
      const places = await suggest(text);
      if (!places.length) {
        choose(null);
        placeInput.value = text;
        setStatus(status, `No place called “${text}” in the gazetteer.`, { error: true });
        return undefined;
      }
      const best = suggested.get(labelOf(places[0]));
      placeInput.value = best.label;
      choose(best);
      setStatus(status, "");
    } catch (error) {
      setStatus(status, error.message, { error: true });
    }
    return undefined;
  }
  placeInput.addEventListener("change", settlePlace);
  placeInput.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      event.preventDefault();
      settlePlace();
    }
  });

  geolocate.addEventListener("click", () => {
    if (!navigator.geolocation) {
      setStatus(status, "This browser cannot share its location.", { error: true });
      return;
    }
    setStatus(status, "Asking the browser for its location…");
    navigator.geolocation.getCurrentPosition(
      (position) => {
        const { latitude, longitude } = position.coords;
        placeInput.value = "";
        choose({ label: "Your location", lat: latitude, lng: longitude, from: "browser" });
        setStatus(status, "");
      },
      (error) => setStatus(status, `No location from the browser: ${error.message || "permission denied"}.`, { error: true }),
      { timeout: 15000, maximumAge: 60000 },
    );
  });
  clearPlace.addEventListener("click", () => {
    choose(null);
    placeInput.focus();
  });

  // --- search ---------------------------------------------------------------------------

  function readForm() {
    const text = query.value.trim();
    if (!text) return { error: "Type what you are looking for first.", focus: query };
    const n = numberField(limit, { label: "Results", min: 1, max: 100, integer: true });
    if (n.error) return { error: n.error, focus: limit };
    return { text, limit: n.value };
  }

  async function search() {
    const read = readForm();
    if (read.error) {
      setStatus(status, read.error, { error: true });
      read.focus.focus();
      return;
    }
    await settlePlace();
    const body = { query: read.text, in_stock: inStock.checked, limit: read.limit };
    if (chosen) body.location = { lat: chosen.lat, lng: chosen.lng };
    setStatus(status, "Searching…");
    try {
      const { data } = await requestJson("/api/products/ai-search", { method: "POST", json: body });
      showParse(data);
      showHits(results, data.results);
      setStatus(status, data.results.length ? "" : "Nothing found, even after relaxing the search.");
    } catch (error) {
      setStatus(status, error.message, { error: true });
    }
  }

  function showParse(data) {
    const parsed = data.parsed;
    clear(chips);
    const chip = (kind, value) => chips.append(el("li", { class: "chip", dataset: { kind } }, [
      el("span", { class: "k", text: kind }), value,
    ]));
    if (parsed.min_price !== null && parsed.max_price !== null) chip("price", `${idr(parsed.min_price)} – ${idr(parsed.max_price)}`);
    else if (parsed.max_price !== null) chip("price", `≤ ${idr(parsed.max_price)}`);
    else if (parsed.min_price !== null) chip("price", `≥ ${idr(parsed.min_price)}`);
    if (parsed.place) chip("place", `${parsed.place.name} (from the search)`);
    else if (chosen) chip("place", `${chosen.label} (picked)`);
    if (parsed.category) chip("category", parsed.category);
    for (const tag of parsed.tags) chip("tag", tag);
    for (const term of parsed.terms) chip("word", term);
    if (parsed.sort) chip("sort", parsed.sort);
    for (const step of data.fallback) chip("relaxed", relaxations[step] ?? step);
    const radius = data.radius_km === null ? "any distance" : `within ${data.radius_km} km`;
    const order = data.location ? "nearest first" : "by relevance (no place)";
    summary.textContent = `${data.total} product${data.total === 1 ? "" : "s"} ${radius}, ${order}.`;
  }

  function showHits(list, hits) {
    clear(list);
    for (const hit of hits) {
      const product = hit.product;
      const stock = product.stock_quantity > 0
        ? el("span", { class: "stock", text: `${product.stock_quantity} in stock` })
        : el("span", { class: "stock out", text: "out of stock" });
      list.append(el("li", {
        class: "result",
        dataset: { productId: product.id, distanceKm: hit.distance_km ?? "" },
      }, [
        el("p", { class: "name", text: product.name }),
        el("p", { class: "facts" }, [
          el("span", { class: "price", text: idr(product.price) }),
          el("span", { class: "distance", text: km(hit.distance_km) }),
          stock,
          el("span", { class: "delivery", text: hit.delivery ? `delivery ${hit.delivery.label}` : "delivery unknown" }),
          el("span", { class: "supplier", text: hit.supplier.name }),
        ]),
      ]));
    }
  }

  // --- the grounded assistant ------------------------------------------------------------

  async function ask() {
    const read = readForm();
    if (read.error) {
      setStatus(status, read.error, { error: true });
      read.focus.focus();
      return;
    }
    const user = userId.value.trim();
    if (!user) {
      createUser.hidden = false;
      setStatus(status, "The assistant answers registered users: create one (needs an app or admin key), or enter a user id.", { error: true });
      return;
    }
    if (!USER_ID.test(user)) {
      setStatus(status, "Assistant user id: a user id is a UUID, as creating a user returns it.", { error: true });
      userId.focus();
      return;
    }
    await settlePlace();
    const body = { user_id: user, message: read.text };
    if (chosen) body.location = { lat: chosen.lat, lng: chosen.lng };
    askButton.disabled = true;
    setStatus(status, "Asking the assistant…");
    answer.textContent = "";
    clear(given);
    try {
      const { data } = await requestJson("/api/chat", { method: "POST", json: body });
      writeText("local", USER_KEY, user);
      createUser.hidden = true;
      answer.textContent = data.answer;
      showHits(given, data.products);
      const finish = data.finish_reason ? `finish_reason ${data.finish_reason}` : "";
      setStatus(status, `Answered from ${data.products.length} product${data.products.length === 1 ? "" : "s"}. ${finish}`);
    } catch (error) {
      if (error instanceof ApiError && error.status === 404 && error.field === "user_id") {
        createUser.hidden = false;
        setStatus(status, `${error.message} The assistant answers registered users of this key: create one (needs an app or admin key).`, { error: true });
      } else {
        setStatus(status, error.message, { error: true });
      }
    } finally {
      askButton.disabled = false;
    }
  }

  async function makeUser() {
    const body = {
      name: "Playground visitor",
      email: `playground-${crypto.randomUUID().slice(0, 12)}@example.com`,
      ai_access_enabled: true,
    };
    if (chosen) body.location = { lat: chosen.lat, lng: chosen.lng };
    createUser.disabled = true;
    try {
      const { data } = await requestJson("/api/users", { method: "POST", json: body });
      userId.value = String(data.id);
      writeText("local", USER_KEY, String(data.id));
      createUser.hidden = true;
      setStatus(status, `Created user ${data.id}; asking again…`);
      await ask();
    } catch (error) {
      setStatus(status, error.message, { error: true });
    } finally {
      createUser.disabled = false;
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    search();
  });
  askButton.addEventListener("click", ask);
  createUser.addEventListener("click", makeUser);
}
