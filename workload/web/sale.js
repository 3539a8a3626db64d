// The sale page: counts down on the server's clock, enables the button at
// the start (the server checks again), buys once per idempotency key,
// follows the order to UNPAID or FAILED and starts the payment. Plain
// JavaScript, no build step: edit and reload.
(() => {
  'use strict';
  const main = document.querySelector('main');
  const sale = main.dataset.sale;
  const base = `/v1/sales/${encodeURIComponent(sale)}`;
  const el = (id) => document.querySelector(`[data-testid="${id}"]`);
  const countdown = el('countdown');
  const statusLine = el('status');
  const buy = el('buy');
  const order = el('order');
  const pay = el('pay');
  const shopperInput = document.getElementById('shopper');
  const orderKey = `flashsale.order.${sale}`;
  const attemptKey = `flashsale.attempt.${sale}`;
  const ticketKey = `flashsale.ticket.${sale}`;
  const queued = main.dataset.queue === 'true';
  const queueBox = el('queue');

  let startsAt = Date.parse(main.dataset.startsAt);
  let endsAt = Date.parse(main.dataset.endsAt);
  let state = 'upcoming';
  let busy = false;
  // With a queue: what the last answer said (waiting, admitted, closed).
  let queueState = null;
  let queueTimer = null;

  // The server's clock from the Date (and a cache's Age) header of every
  // status answer, second-granular: each answer bounds the offset from below
  // and above, and the bounds close in as answers arrive at other phases.
  let low = -Infinity;
  let high = Infinity;
  const offset = () => (Number.isFinite(low) && Number.isFinite(high) ? (low + high) / 2 : 0);
  const serverNow = () => Date.now() + offset();

  function sample(response, sent, received) {
    const date = Date.parse(response.headers.get('Date') || '');
    if (Number.isNaN(date)) return;
    // Date and Age are whole seconds, each rounded down.
    const age = response.headers.get('Age');
    const ageMs = 1000 * (Number(age) || 0);
    const lo = date + ageMs - received;
    const hi = date + ageMs + (age ? 2000 : 1000) - sent;
    if (lo > high || hi < low) { low = lo; high = hi; return; } // the clock jumped
    low = Math.max(low, lo);
    high = Math.min(high, hi);
  }

  for (const t of document.querySelectorAll('time[data-local]')) {
    t.textContent = new Date(t.getAttribute('datetime')).toLocaleString();
  }

  function identity() {
    const token = localStorage.getItem('flashsale.token');
    if (token) return { Authorization: `Bearer ${token}` };
    const id = shopperInput.value.trim();
    return id ? { 'X-User-Id': id } : {};
  }
  if (main.dataset.devIdentity === 'true' && !localStorage.getItem('flashsale.token')) {
    shopperInput.closest('.identity').hidden = false;
    shopperInput.value = localStorage.getItem('flashsale.shopper') || '';
    shopperInput.addEventListener('change', () => {
      localStorage.setItem('flashsale.shopper', shopperInput.value.trim());
    });
  }

  const words = {
    upcoming: 'Not started yet.',
    live: 'On sale now.',
    paused: 'Paused by the shop; it may resume.',
    soldOut: 'Sold out.',
    ended: 'The sale has ended.',
  };
  const stockWords = { plenty: '', few: ' Only a few left.', none: '' };

  function clock(ms) {
    const s = Math.max(0, Math.ceil(ms / 1000));
    const pad = (n) => String(n).padStart(2, '0');
    const days = Math.floor(s / 86400);
    const hms = `${pad(Math.floor(s / 3600) % 24)}:${pad(Math.floor(s / 60) % 60)}:${pad(s % 60)}`;
    return days > 0 ? `${days} d ${hms}` : hms;
  }

  function render() {
    const now = serverNow();
    if (now < startsAt) {
      countdown.textContent = `Starts in ${clock(startsAt - now)}`;
    } else if (now < endsAt && state !== 'soldOut' && state !== 'ended') {
      countdown.textContent = `Ends in ${clock(endsAt - now)}`;
    } else {
      countdown.textContent = words[state === 'soldOut' ? 'soldOut' : 'ended'];
    }
    const selling = state === 'upcoming' || state === 'live';
    if (queued && queueState !== 'admitted') {
      const opens = startsAt - Number(main.dataset.prequeueMs);
      const joined = Boolean(localStorage.getItem(ticketKey));
      buy.textContent = joined ? 'In the queue' : 'Join the queue';
      buy.disabled = busy || joined || !(now >= opens && now < endsAt && selling);
      if (state === 'soldOut' || state === 'ended') showQueue('closed');
      return;
    }
    buy.textContent = 'Buy';
    const open = now >= startsAt && now < endsAt && selling;
    buy.disabled = busy || !open || Boolean(localStorage.getItem(orderKey));
  }

  async function pollStatus() {
    const sent = Date.now();
    try {
      const response = await fetch(`${base}/status`);
      sample(response, sent, Date.now());
      if (response.ok) {
        const body = await response.json();
        state = body.state;
        startsAt = Date.parse(body.startsAt);
        endsAt = Date.parse(body.endsAt);
        statusLine.textContent = words[state] + (state === 'live' ? stockWords[body.stock] : '');
      }
    } catch (e) {
      statusLine.textContent = 'Reconnecting…';
    }
    render();
  }

  function randomKey() {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
  }

  const refusals = {
    SOLD_OUT: 'Sold out.',
    LIMIT_EXCEEDED: 'You already hold as many as one shopper may.',
    ENDED: 'The sale has ended.',
    PAUSED: 'Paused by the shop; try again shortly.',
    UNAUTHENTICATED: 'Sign in first.',
    TOKEN_INVALID: 'Your purchase token was refused; try again.',
  };
  // NOT_STARTED too: the button opens on the page's estimate of the
  // server's clock, which may run up to a fraction of a second ahead.
  const retryable = new Set(['BUSY', 'UNAVAILABLE', 'RATE_LIMITED', 'OUTCOME_UNKNOWN', 'NOT_WARMED', 'NOT_STARTED']);

  async function purchaseToken() {
    if (queued) {
      const place = await followQueue();
      if (place && place.purchaseToken) return place.purchaseToken.token;
      throw { code: 'TOKEN_REQUIRED', message: 'Your turn has not come yet.' };
    }
    const response = await fetch(`${base}/token`, { headers: identity() });
    const body = await response.json();
    if (!response.ok) throw body;
    return body.token;
  }

  // One purchase, retried with the same key (the API answers a retry with
  // the first answer), so a reload or a lost answer never buys twice.
  async function purchase() {
    const key = sessionStorage.getItem(attemptKey) || randomKey();
    sessionStorage.setItem(attemptKey, key);
    for (let attempt = 0; attempt < 10; attempt += 1) {
      const headers = { ...identity(), 'Idempotency-Key': key, 'Content-Type': 'application/json' };
      let body;
      let response;
      try {
        if (queued || main.dataset.tokenRequired === 'true') headers['Purchase-Token'] = await purchaseToken();
        response = await fetch(`${base}/orders`, { method: 'POST', headers, body: '{"quantity":1}' });
        body = await response.json();
      } catch (e) {
        body = e && e.code ? e : { code: 'UNAVAILABLE' };
      }
      if (response && response.status === 202) {
        sessionStorage.removeItem(attemptKey);
        localStorage.setItem(orderKey, body.orderId);
        return body.orderId;
      }
      if (!retryable.has(body.code)) {
        sessionStorage.removeItem(attemptKey);
        statusLine.textContent = refusals[body.code] || body.message || 'Refused.';
        return null;
      }
      statusLine.textContent = 'Busy; trying again…';
      const wait = Number(response && response.headers.get('Retry-After')) || 1;
      await new Promise((done) => setTimeout(done, wait * 1000));
    }
    statusLine.textContent = 'No answer; try again.';
    return null;
  }

  function showOrder(id, orderState, note) {
    order.hidden = false;
    order.dataset.orderId = id;
    order.dataset.state = orderState;
    order.querySelector('.order-id').textContent = id;
    order.querySelector('.order-state').textContent = orderState;
    order.querySelector('.order-note').textContent = note || '';
    pay.hidden = orderState !== 'UNPAID';
  }

  // PENDING until a consumer persists it, then UNPAID (or FAILED).
  async function follow(id) {
    showOrder(id, 'PENDING', 'Accepted; confirming…');
    for (;;) {
      try {
        const response = await fetch(`/v1/orders/${id}`, { headers: identity() });
        const body = await response.json();
        if (response.ok && body.status !== 'PENDING') {
          const note = body.status === 'FAILED' ? body.failureReason || 'The order failed.' : '';
          showOrder(id, body.status, note);
          return;
        }
      } catch (e) { /* keep asking */ }
      await new Promise((done) => setTimeout(done, 500));
    }
  }

  function showQueue(place, body) {
    queueBox.hidden = false;
    queueBox.dataset.state = place;
    if (place === 'closed') {
      queueBox.textContent = 'Sold out or over: the queue is closed.';
    } else if (place === 'admitted') {
      queueBox.textContent = 'Your turn: you may buy now.';
    } else if (body && body.position) {
      queueBox.dataset.position = body.position;
      queueBox.dataset.eta = body.etaSeconds;
      queueBox.textContent = `You are number ${body.position} in line: about ${clock(1000 * body.etaSeconds)} to go.`;
    } else if (body) {
      queueBox.textContent = `You are in the queue. Places are drawn by lot at the start, in ${clock(1000 * body.etaSeconds)}.`;
    }
  }

  const zeroBits = (bytes) => {
    let bits = 0;
    for (const b of bytes) {
      if (b) return bits + Math.clz32(b) - 24;
      bits += 8;
    }
    return bits;
  };

  // The proof of work: a string whose SHA-256 after the nonce has enough
  // leading zero bits, tried 256 at a time.
  async function solve(nonce, difficulty) {
    const encoder = new TextEncoder();
    for (let start = 0; ; start += 256) {
      const tries = Array.from({ length: 256 }, (_, i) => String(start + i));
      const digests = await Promise.all(tries.map((t) => crypto.subtle.digest('SHA-256', encoder.encode(`${nonce}:${t}`))));
      const found = digests.findIndex((d) => zeroBits(new Uint8Array(d)) >= difficulty);
      if (found >= 0) return tries[found];
    }
  }

  async function joinQueue() {
    let body = '{}';
    if (main.dataset.challenge === 'true') {
      queueBox.hidden = false;
      queueBox.textContent = 'Proving you are a person (a few seconds of work for this device)…';
      const response = await fetch(`${base}/challenge`, { headers: identity() });
      const challenge = await response.json();
      if (!response.ok) throw challenge;
      body = JSON.stringify({ challenge: { nonce: challenge.nonce, solution: await solve(challenge.nonce, challenge.difficulty) } });
    }
    const response = await fetch(`${base}/queue`, {
      method: 'POST', headers: { ...identity(), 'Content-Type': 'application/json' }, body,
    });
    const place = await response.json();
    if (!response.ok) throw place;
    localStorage.setItem(ticketKey, place.ticket);
    return place;
  }

  // Asks where the ticket stands, shows it and asks again when told to.
  async function followQueue() {
    const ticket = localStorage.getItem(ticketKey);
    if (!ticket) return null;
    clearTimeout(queueTimer);
    let place = null;
    try {
      const response = await fetch(`${base}/queue/${encodeURIComponent(ticket)}`, { headers: identity() });
      place = await response.json();
      if (response.status === 404) localStorage.removeItem(ticketKey);
      if (response.ok) {
        queueState = place.state;
        showQueue(place.state, place);
      }
    } catch (e) { /* ask again */ }
    const after = place && place.pollAfterSeconds ? place.pollAfterSeconds : 2;
    if (queueState !== 'closed') queueTimer = setTimeout(followQueue, 1000 * after);
    render();
    return place;
  }

  buy.closest('form').addEventListener('submit', async (event) => {
    event.preventDefault();
    if (buy.disabled) return;
    if (queued && queueState !== 'admitted') {
      busy = true;
      render();
      try {
        const place = await joinQueue();
        queueState = place.state;
        showQueue(place.state, place);
        followQueue();
      } catch (e) {
        statusLine.textContent = (e && e.message) || 'Could not join the queue; try again.';
      }
      busy = false;
      render();
      return;
    }
    busy = true;
    render();
    statusLine.textContent = 'Buying…';
    const id = await purchase();
    busy = false;
    render();
    if (id) {
      statusLine.textContent = 'Bought.';
      await follow(id);
    }
  });

  pay.addEventListener('click', async () => {
    pay.disabled = true;
    const id = order.dataset.orderId;
    const response = await fetch(`/v1/orders/${id}/pay`, { method: 'POST', headers: identity() });
    const body = await response.json();
    pay.disabled = false;
    order.querySelector('.order-note').textContent = response.ok
      ? `Payment ${body.paymentId} started: complete it with the payment provider.`
      : refusals[body.code] || body.message;
  });

  const earlier = localStorage.getItem(orderKey);
  if (earlier) follow(earlier);
  if (queued) {
    for (const li of document.querySelectorAll('[data-queue-only]')) li.hidden = false;
    followQueue();
  } else {
    for (const li of document.querySelectorAll('[data-queue-only]')) li.hidden = true;
  }
  // About once a second, at a drifting phase: the clock's bounds close in
  // only on answers that arrive at different fractions of a second.
  const poll = () => pollStatus().finally(() => setTimeout(poll, 870 + Math.random() * 260));
  poll();
  setInterval(render, 250);
})();
