/*
 * hai-scheduler dashboard behaviour. Loaded with `defer` after htmx.min.js.
 *
 * The Content-Security-Policy allows no inline script, no eval and no inline
 * style, so every behaviour lives here as a delegated listener on `document`:
 *   (a) CSRF token on every htmx request (header X-CSRFToken, read by Flask-WTF);
 *   (b) reload the page when the token has expired (never leave a dead button);
 *       other htmx errors are shown as a flash message instead of nothing;
 *   (c) <time datetime="...UTC..."> shown in the viewer's zone, zone named, UTC on hover
 *       (the server writes them all through webapp/timefmt.py: UTC, named);
 *   (d) confirmation for elements carrying data-confirm="message";
 *   (e) every table scrolls inside its own box (.table-wrap), reachable by keyboard;
 *   (f) a refresh swap (the Logs page's 5-second poll) keeps the reader where they were;
 *   (g) after a refused form, focus goes to the first field with an error.
 * The pages work without this file: plain forms carry a hidden csrf_token and
 * <time> elements already show the UTC value rendered by the server.
 */
(function () {
  "use strict";

  /* ---- (a) CSRF header ------------------------------------------------ */

  // Read the token at request time: a boosted navigation may bring a new one.
  function csrfToken() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : "";
  }

  document.addEventListener("htmx:configRequest", function (evt) {
    var token = csrfToken();
    // htmx only sends to our own origin (selfRequestsOnly), so the token never leaks.
    if (token) evt.detail.headers["X-CSRFToken"] = token;
  });

  /* ---- (b) expired token -> reload; other errors -> flash --------------- */

  var CSRF_EXPIRED = /CSRF (session )?token (has )?expired|CSRF token is expired/i;
  var reloading = false;

  function needsReload(xhr) {
    if (!xhr || xhr.status !== 400) return false;
    if (xhr.getResponseHeader("HX-Refresh") === "true") return true;
    var text = "";
    try { text = xhr.responseText || ""; } catch (e) { /* non-text response */ }
    return CSRF_EXPIRED.test(text);
  }

  // afterRequest fires for every completed request, swapped or not.
  document.addEventListener("htmx:afterRequest", function (evt) {
    if (!reloading && needsReload(evt.detail.xhr)) {
      reloading = true; // htmx itself also reloads on HX-Refresh; once is enough
      window.location.reload();
    }
  });

  // htmx does not swap 4xx/5xx responses by default, so without this a failed
  // click would look like nothing happened. Show a short message instead.
  function flash(text, category) {
    var box = document.getElementById("flashes");
    if (!box) return;
    // Keep only the latest client-side message; server flashes stay.
    Array.prototype.forEach.call(box.querySelectorAll("[data-client-flash]"), function (old) { old.remove(); });
    var div = document.createElement("div");
    div.setAttribute("data-client-flash", "");
    div.className = "flash flash-" + (category || "error");
    div.setAttribute("role", "alert");
    div.textContent = text; // textContent: the message is never parsed as HTML
    box.appendChild(div);
  }

  // Prefer the server's own words: errors.html marks them with data-error-message.
  function serverMessage(xhr) {
    try {
      var doc = new DOMParser().parseFromString(xhr.responseText || "", "text/html");
      var el = doc.querySelector("[data-error-message]");
      return el ? el.textContent.trim() : "";
    } catch (e) {
      return "";
    }
  }

  document.addEventListener("htmx:responseError", function (evt) {
    var xhr = evt.detail.xhr;
    if (reloading || needsReload(xhr)) return;
    var detail = serverMessage(xhr);
    flash(detail ? detail + " (" + xhr.status + ")" : "Request failed (" + xhr.status + " " + xhr.statusText + ").");
  });

  document.addEventListener("htmx:sendError", function () {
    flash("The server could not be reached. Check the connection and try again.");
  });

  /* ---- (c) local times --------------------------------------------------- */

  function parseUtc(value) {
    if (!value || !/\d[T ]\d/.test(value)) return null; // date-only: leave as is
    var iso = value.trim().replace(" ", "T");
    // A date-time without an offset would be read as local time: it is UTC here.
    if (!/(Z|[+-]\d\d:?\d\d)$/i.test(iso)) iso += "Z";
    var date = new Date(iso);
    return isNaN(date.getTime()) ? null : date;
  }

  // "2026-12-01 08:03:54 CET": the viewer's zone, named (en-GB names it "CET", "BST", "GMT+9").
  function two(n) { return (n < 10 ? "0" : "") + n; }

  function zoneName(date) {
    try {
      var parts = new Intl.DateTimeFormat("en-GB", { timeZoneName: "short" }).formatToParts(date);
      for (var i = 0; i < parts.length; i++) if (parts[i].type === "timeZoneName") return parts[i].value;
    } catch (e) { /* no Intl: the offset below */ }
    var offset = -date.getTimezoneOffset();
    return "UTC" + (offset < 0 ? "-" : "+") + two(Math.floor(Math.abs(offset) / 60)) + ":" + two(Math.abs(offset) % 60);
  }

  function localText(date) {
    return date.getFullYear() + "-" + two(date.getMonth() + 1) + "-" + two(date.getDate()) + " " +
      two(date.getHours()) + ":" + two(date.getMinutes()) + ":" + two(date.getSeconds()) + " " + zoneName(date);
  }

  function utcText(date) { return date.toISOString().slice(0, 19).replace("T", " ") + " UTC"; }

  function localizeTimes(root) {
    var scope = root && root.querySelectorAll ? root : document;
    var nodes = scope.querySelectorAll("time[datetime]");
    // querySelectorAll skips the root itself.
    if (scope.matches && scope.matches("time[datetime]")) nodes = [scope].concat(Array.prototype.slice.call(nodes));
    Array.prototype.forEach.call(nodes, function (el) {
      var date = parseUtc(el.getAttribute("datetime"));
      if (!date) return;
      // Idempotent: always derived from the datetime attribute, never from the text.
      // A relative time ("3 s ago", counted on the DB clock by the server) keeps its words;
      // its hover names both the viewer's time and UTC.
      if (el.hasAttribute("data-relative")) {
        el.title = localText(date) + " (" + utcText(date) + ")";
        return;
      }
      el.textContent = localText(date);
      el.title = utcText(date); // 2025-01-31 23:05:00 UTC
    });
  }

  document.addEventListener("DOMContentLoaded", function () { localizeTimes(document); });

  // Time filters typed as local wall times are read in the zone of an empty
  // input[data-viewer-tz]: fill it with the browser's zone (without JS it stays UTC).
  document.addEventListener("DOMContentLoaded", function () {
    var zone = "";
    try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { zone = ""; }
    if (!zone) return;
    Array.prototype.forEach.call(document.querySelectorAll("input[data-viewer-tz]"), function (el) {
      if (!el.value) el.value = zone;
    });
  });
  // htmx:load fires on each piece of new content (and the body on start-up).
  document.addEventListener("htmx:load", function (evt) { localizeTimes(evt.detail && evt.detail.elt); });
  document.addEventListener("htmx:afterSwap", function (evt) { localizeTimes(evt.detail && evt.detail.target); });

  /* ---- (d) confirmation ---------------------------------------------------- */

  // The message sits on the requesting element (form, button, link) or on the
  // submit button that was pressed.
  function confirmMessage(elt, triggeringEvent) {
    var submitter = triggeringEvent && triggeringEvent.submitter;
    if (submitter && submitter.hasAttribute("data-confirm")) return submitter.getAttribute("data-confirm");
    return elt && elt.getAttribute ? elt.getAttribute("data-confirm") : null;
  }

  // htmx-driven elements: hold the request, ask, then let htmx send it.
  document.addEventListener("htmx:confirm", function (evt) {
    var message = confirmMessage(evt.detail.elt, evt.detail.triggeringEvent);
    if (!message) return;
    evt.preventDefault();
    if (window.confirm(message)) evt.detail.issueRequest(true);
  });

  // Plain forms. htmx's own submit handler sits on the form and runs before this
  // document listener; it cancels the native submit, so such forms are skipped
  // here (htmx:confirm above asks for them).
  document.addEventListener("submit", function (evt) {
    if (evt.defaultPrevented) return;
    var message = confirmMessage(evt.target, evt);
    if (message && !window.confirm(message)) evt.preventDefault();
  });

  /* ---- (e) wide tables scroll inside their own box ---------------------------- */

  function each(root, selector, fn) {
    var scope = root && root.querySelectorAll ? root : document;
    var nodes = Array.prototype.slice.call(scope.querySelectorAll(selector));
    if (scope.matches && scope.matches(selector)) nodes.unshift(scope);
    nodes.forEach(fn);
  }

  // The heading the reader last passed before `el` (document order), if any.
  function precedingHeading(el) {
    for (var node = el; node && node !== document.body; node = node.parentElement) {
      for (var sib = node.previousElementSibling; sib; sib = sib.previousElementSibling) {
        if (/^H[1-3]$/.test(sib.tagName)) return sib;
        var inner = sib.querySelectorAll("h1, h2, h3");
        if (inner.length) return inner[inner.length - 1];
      }
    }
    return null;
  }

  // The name of a table's box: its caption, else the heading above it; unique on the page
  // (landmarks of one role need distinct names).
  function tableName(wrap) {
    var source = wrap.querySelector("caption") || precedingHeading(wrap);
    var text = source ? source.textContent.replace(/\s+/g, " ").trim() : "";
    var name = text ? text + " (table)" : "Table";
    var taken = function (candidate) {
      return !!document.querySelector('.table-wrap[aria-label="' + candidate.replace(/["\\]/g, "\\$&") + '"]');
    };
    for (var n = 2, base = name; taken(name); n++) name = base + " " + n;
    return name;
  }

  function wrapTables(root) {
    each(root, "main table", function (table) {
      if (table.closest(".table-wrap")) return;
      var wrap = document.createElement("div");
      wrap.className = "table-wrap";
      table.parentNode.insertBefore(wrap, table);
      wrap.appendChild(table);
    });
    // A box that scrolls must be reachable by keyboard (arrow keys scroll it) and say what it holds.
    each(root, ".table-wrap", function (wrap) {
      if (wrap.hasAttribute("tabindex")) return;
      wrap.setAttribute("tabindex", "0");
      wrap.setAttribute("role", "region");
      wrap.setAttribute("aria-label", tableName(wrap));
    });
  }

  document.addEventListener("DOMContentLoaded", function () { wrapTables(document); });
  document.addEventListener("htmx:load", function (evt) { wrapTables(evt.detail && evt.detail.elt); });

  /* ---- (f) refreshes keep the reader in place ---------------------------------- */

  // A poll (hx-trigger "every ...") replaces content the operator may be reading: keep the page's
  // and every scrolled box's position, and the focus, across the swap.
  var kept = null;

  function isPoll(elt) {
    return !!(elt && elt.getAttribute && /\bevery\b/.test(elt.getAttribute("hx-trigger") || ""));
  }

  document.addEventListener("htmx:beforeSwap", function (evt) {
    var config = evt.detail.requestConfig;
    if (!evt.detail.shouldSwap || !isPoll((config && config.elt) || evt.target)) return;
    var boxes = [];
    each(evt.detail.target, ".table-wrap", function (box) { boxes.push([box.scrollTop, box.scrollLeft]); });
    var focused = document.activeElement;
    kept = { x: window.scrollX, y: window.scrollY, boxes: boxes,
             focus: focused && focused.id ? focused.id : null,
             height: document.documentElement.scrollHeight };
    // Hold the page's height while the old rows go and the new ones come in.
    document.body.style.minHeight = kept.height + "px";
  });

  document.addEventListener("htmx:afterSwap", function (evt) {
    if (!kept) return;
    var state = kept;
    kept = null;
    var index = 0;
    each(evt.detail.target, ".table-wrap", function (box) {
      var at = state.boxes[index++];
      if (at) { box.scrollTop = at[0]; box.scrollLeft = at[1]; }
    });
    document.body.style.minHeight = "";
    window.scrollTo(state.x, state.y);
    var focus = state.focus && document.getElementById(state.focus);
    if (focus && document.activeElement !== focus) focus.focus({ preventScroll: true });
  });

  /* ---- (g) focus the first error ------------------------------------------------- */

  // A page re-rendered after a refused form marks the bad fields aria-invalid; the operator
  // starts at the first of them (the message is tied to it by aria-describedby).
  function focusFirstError(root) {
    var scope = root && root.querySelector ? root : document;
    var field = scope.querySelector("main form [aria-invalid='true']");
    if (field && typeof field.focus === "function") field.focus();
  }

  document.addEventListener("DOMContentLoaded", function () { focusFirstError(document); });
  // A boosted form (hx-boost) comes back by a swap, not a page load: the same after a refused post.
  document.addEventListener("htmx:afterSettle", function (evt) {
    var config = evt.detail.requestConfig;
    if (config && String(config.verb).toLowerCase() === "post") focusFirstError(document);
  });
})();
