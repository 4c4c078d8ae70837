// A real OpenID provider for the tests: the certified `oidc-provider` package, configured from a
// JSON document and listening on 127.0.0.1 over plain HTTP.
//
//   node provider.mjs config.json [--exit-with-stdin]
//
// With --exit-with-stdin it also ends when its stdin reaches end of file: a parent that holds the other end
// of a pipe cannot leave it running behind when the parent dies (even by SIGKILL).
//
// config.json:
//   {"port": 5123,
//    "clients": [{"client_id": "hai", "client_secret": "s3cret", "redirect_uris": ["http://127.0.0.1:8000/auth/callback"],
//                 "post_logout_redirect_uris": ["http://127.0.0.1:8000/"]}],
//    "users": {"alice": {"groups": ["payments-ops"], "email": "alice@example.test", "name": "Alice"}},
//    "admin_token": "random", "id_token_ttl": 600}
//
// Optional per client: "token_endpoint_auth_method" (default client_secret_basic). A redirect_uri must be sent
// in every authorization and token request (even for a client with a single one registered).
//
// The issuer is http://127.0.0.1:<port>. Once listening it prints one line `READY <issuer>` on stdout;
// everything else (request log, errors) goes to stderr. SIGTERM / SIGINT end it.
//
// What the provider does:
//   - discovery (/.well-known/openid-configuration), JWKS (/jwks), authorization code flow only, PKCE (S256)
//     required for every client, nonce echoed in the ID token, client_secret_basic and client_secret_post
//     (oidc-provider accepts either for a client registered with one of them), userinfo (/me);
//   - scopes openid profile email groups; claims sub (= the user name), preferred_username, name, email,
//     email_verified, groups (an array), and all granted claims also in the ID token (conformIdTokenClaims: false);
//   - its own interaction pages (devInteractions off): GET /interaction/<uid> is a login page with a plain
//     <form method="post"> (inputs `username`, `password`, a "Sign in" button); any password is accepted, an
//     unknown user gets the form again with an error; consent is granted automatically (no page). Signing in as
//     another user over a live provider session first ends that session through an auto-submitted hidden form
//     (oidc-provider's own behaviour);
//   - RP-initiated logout (/session/end): oidc-provider always asks for a confirmation, there is no setting to
//     skip it; the page here holds a plain HTML form (id "op.logoutForm", hidden xsrf and logout=yes, a "Sign out"
//     button) that an inline script submits at once in a browser; without JavaScript, POST the form;
//   - a signing key (RS256) generated at start, kept in memory; everything else (sessions, codes, grants) is
//     in oidc-provider's in-memory adapter too: a restart forgets all;
//   - cookies op_session, op_interaction, op_interaction_resume (signed: each with a .sig companion), HttpOnly,
//     SameSite=Lax, no Secure flag (oidc-provider sets it only on HTTPS requests);
//   - a test-admin API on the same port, every call with `Authorization: Bearer <admin_token>`:
//       PUT    /test-admin/users/<name>   {"groups": [...], "email": ..., "name": ...}  create or change a user
//       GET    /test-admin/users/<name>   the user's claims (404 when there is none)
//       DELETE /test-admin/users/<name>   a provider session of the removed user asks for a login again
//       POST   /test-admin/mischief       {"next_id_token": "forged" | "expired" | "wrong_audience" |
//                                           "wrong_issuer" | "wrong_nonce" | null}
//              replaces the id_token of the NEXT successful token-endpoint response that carries one, once:
//              forged = same claims signed by another, fresh RSA key under the real kid; expired = iat and exp more
//              than an hour in the past; wrong_audience = aud another client; wrong_issuer = iss another URL;
//              wrong_nonce = nonce changed. All but `forged` are signed with the real key.
//       GET    /test-admin/mischief       {"next_id_token": <armed kind or null>}
//       GET    /test-admin/log            every token-endpoint request seen, oldest first: {"grant_type",
//              "client_id", "code_verifier_sent", "outcome": "success" | <error code>, "error_description",
//              "error_detail" (oidc-provider's internal reason, e.g. "authorization code already consumed"),
//              "mischief"}
//       DELETE /test-admin/log            forget the log

import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';

import { SignJWT, decodeJwt, decodeProtectedHeader, exportJWK, generateKeyPair, importJWK } from 'jose';
import Provider, { interactionPolicy } from 'oidc-provider';

const MISCHIEF_KINDS = new Set(['forged', 'expired', 'wrong_audience', 'wrong_issuer', 'wrong_nonce']);
const SCOPES = ['openid', 'profile', 'email', 'groups'];

const log = (...args) => console.error('[oidc-provider]', ...args);

function fail(message) {
  console.error(`[oidc-provider] ${message}`);
  process.exit(2);
}

if (process.argv.length < 3) {
  fail('usage: node provider.mjs <config.json>');
}

let config;
try {
  config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
} catch (err) {
  fail(`cannot read the configuration ${process.argv[2]}: ${err.message}`);
}

const port = Number(config.port);
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  fail(`"port" must be a TCP port number, got ${JSON.stringify(config.port)}`);
}
if (typeof config.admin_token !== 'string' || config.admin_token.length === 0) {
  fail('"admin_token" must be a non-empty string');
}
const idTokenTtl = config.id_token_ttl === undefined ? 600 : Number(config.id_token_ttl);
if (!Number.isInteger(idTokenTtl) || idTokenTtl <= 0) {
  fail(`"id_token_ttl" must be a positive whole number of seconds, got ${JSON.stringify(config.id_token_ttl)}`);
}

const issuer = `http://127.0.0.1:${port}`;

// ---------------------------------------------------------------- state the admin API changes

const users = new Map();

function putUser(name, doc) {
  const groups = doc.groups ?? [];
  if (!Array.isArray(groups) || !groups.every((g) => typeof g === 'string')) {
    throw new TypeError('"groups" must be a list of strings');
  }
  for (const key of ['email', 'name']) {
    if (doc[key] !== undefined && doc[key] !== null && typeof doc[key] !== 'string') {
      throw new TypeError(`"${key}" must be a string`);
    }
  }
  users.set(name, {
    groups: [...groups],
    email: doc.email ?? `${name}@example.test`,
    name: doc.name ?? name,
  });
}

for (const [name, doc] of Object.entries(config.users ?? {})) {
  putUser(name, doc ?? {});
}

let nextMischief = null;
const tokenLog = [];

// ---------------------------------------------------------------- keys

const signingKid = `rs256-${randomUUID()}`;
const { privateKey: signingKey } = await generateKeyPair('RS256', { extractable: true, modulusLength: 2048 });
const signingJwk = { ...(await exportJWK(signingKey)), kid: signingKid, alg: 'RS256', use: 'sig' };

// ---------------------------------------------------------------- pages

const esc = (value) => String(value ?? '').replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function page(title, body) {
  return `<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>${esc(title)}</title></head>
<body>
${body}
</body>
</html>`;
}

function loginPage(uid, clientId, { username = '', error = '' } = {}) {
  return page('Sign in - test OpenID provider', `<h1>Sign in</h1>
<p>to continue to <span id="client">${esc(clientId)}</span></p>
${error ? `<p class="error" id="error" role="alert">${esc(error)}</p>` : ''}
<form method="post" action="/interaction/${esc(uid)}/login" autocomplete="off">
  <label>User name <input type="text" name="username" value="${esc(username)}" autofocus></label>
  <label>Password <input type="password" name="password"></label>
  <button type="submit">Sign in</button>
</form>`);
}

async function logoutSource(ctx, form) {
  // `form` is oidc-provider's <form id="op.logoutForm" method="post" action="/session/end/confirm"> with the
  // hidden xsrf input. logout=yes ends the whole provider session (every client), as a real sign-out does.
  const full = form.replace('</form>', '<input type="hidden" name="logout" value="yes"/>'
    + '<button type="submit" id="sign-out">Sign out</button></form>');
  ctx.type = 'html';
  ctx.body = page('Sign out - test OpenID provider', `<h1>Signing out</h1>
${full}
<script>document.getElementById('op.logoutForm').submit();</script>`);
}

async function postLogoutSuccessSource(ctx) {
  ctx.type = 'html';
  ctx.body = page('Signed out - test OpenID provider', '<h1>Signed out</h1>');
}

async function renderError(ctx, out) {
  ctx.type = 'html';
  ctx.body = page('Error - test OpenID provider', `<h1>Error</h1>
<p id="error">${esc(out.error)}</p>
<p id="error_description">${esc(out.error_description)}</p>`);
}

// ---------------------------------------------------------------- provider

// oidc-provider's prompts (login, then consent), plus: a provider session whose user was removed through the
// admin API asks for a login again (without this check, oidc-provider answers such a session with a 500)
const policy = interactionPolicy.base();
policy.get('login').checks.add(new interactionPolicy.Check(
  'account_removed',
  'the signed-in user no longer exists',
  'login_required',
  (ctx) => Boolean(ctx.oidc.session.accountId) && !ctx.oidc.account,
));

const clients = (config.clients ?? []).map((c) => ({
  client_id: c.client_id,
  client_secret: c.client_secret,
  redirect_uris: c.redirect_uris ?? [],
  post_logout_redirect_uris: c.post_logout_redirect_uris ?? [],
  grant_types: ['authorization_code'],
  response_types: ['code'],
  token_endpoint_auth_method: c.token_endpoint_auth_method ?? 'client_secret_basic',
  id_token_signed_response_alg: 'RS256',
}));

const provider = new Provider(issuer, {
  clients,
  jwks: { keys: [signingJwk] },
  async findAccount(ctx, sub) {
    const user = users.get(sub);
    if (!user) {
      return undefined;
    }
    return {
      accountId: sub,
      async claims() {
        // read again at every use: a user changed through the admin API shows in the next token
        const now = users.get(sub) ?? user;
        return {
          sub,
          preferred_username: sub,
          name: now.name,
          email: now.email,
          email_verified: true,
          groups: [...now.groups],
        };
      },
    };
  },
  claims: {
    openid: ['sub'],
    profile: ['name', 'preferred_username'],
    email: ['email', 'email_verified'],
    groups: ['groups'],
    // oidc-provider's defaults (standalone claims a client may ask for with the claims parameter)
    acr: null,
    sid: null,
    auth_time: null,
    iss: null,
  },
  scopes: SCOPES,
  responseTypes: ['code'],
  conformIdTokenClaims: false,
  allowOmittingSingleRegisteredRedirectUri: false,
  pkce: { required: () => true },
  ttl: { IdToken: idTokenTtl },
  cookies: {
    // distinct names: the relying party under test also runs on 127.0.0.1, and cookies ignore ports
    names: { session: 'op_session', interaction: 'op_interaction', resume: 'op_interaction_resume' },
    // no Secure flag: oidc-provider adds it only when the request itself is HTTPS (ctx.secure)
    long: { httpOnly: true, sameSite: 'lax' },
    short: { httpOnly: true, sameSite: 'lax' },
    keys: [randomBytes(32).toString('base64url')],
  },
  features: {
    devInteractions: { enabled: false },
    rpInitiatedLogout: { enabled: true, logoutSource, postLogoutSuccessSource },
    userinfo: { enabled: true },
  },
  interactions: {
    policy,
    url: (ctx, interaction) => `/interaction/${interaction.uid}`,
  },
  renderError,
});

provider.on('server_error', (ctx, err) => log('server_error', err));
provider.on('grant.error', (ctx, err) => {
  ctx.state.grantError = err;
});

// ---------------------------------------------------------------- mischief on the token endpoint

async function tamper(kind, idToken, clientId) {
  const claims = decodeJwt(idToken);
  const header = decodeProtectedHeader(idToken);
  const now = Math.floor(Date.now() / 1000);
  let key = signingKey;
  switch (kind) {
    case 'forged':
      ({ privateKey: key } = await generateKeyPair('RS256', { modulusLength: 2048 }));
      break;
    case 'expired': {
      claims.exp = now - 3600;
      claims.iat = claims.exp - idTokenTtl;
      if (claims.auth_time !== undefined) {
        claims.auth_time = Math.min(claims.auth_time, claims.iat);
      }
      break;
    }
    case 'wrong_audience': {
      const other = clients.find((c) => c.client_id !== clientId);
      claims.aud = other ? other.client_id : `not-${clientId}`;
      delete claims.azp;
      break;
    }
    case 'wrong_issuer':
      claims.iss = `${issuer}/wrong-issuer`;
      break;
    case 'wrong_nonce':
      claims.nonce = `${claims.nonce ?? ''}-tampered-${randomBytes(6).toString('hex')}`;
      break;
    default:
      throw new Error(`unknown mischief ${kind}`);
  }
  return new SignJWT(claims).setProtectedHeader({ ...header, alg: 'RS256', kid: signingKid }).sign(key);
}

async function tokenEndpointWatch(ctx, next) {
  await next();
  const params = ctx.oidc?.params ?? {};
  const body = ctx.body && typeof ctx.body === 'object' && !Buffer.isBuffer(ctx.body) ? ctx.body : {};
  const entry = {
    at: new Date().toISOString(),
    grant_type: params.grant_type ?? null,
    client_id: ctx.oidc?.client?.clientId ?? params.client_id ?? null,
    code_verifier_sent: typeof params.code_verifier === 'string' && params.code_verifier.length > 0,
    status: ctx.status,
    outcome: ctx.status === 200 && !body.error ? 'success' : (body.error ?? `http_${ctx.status}`),
    error_description: body.error_description ?? null,
    error_detail: ctx.state.grantError?.error_detail ?? null,
    mischief: null,
  };
  if (entry.outcome === 'success' && typeof body.id_token === 'string' && nextMischief) {
    const kind = nextMischief;
    nextMischief = null;
    body.id_token = await tamper(kind, body.id_token, entry.client_id);
    entry.mischief = kind;
    log(`mischief ${kind} applied to the id_token for ${entry.client_id}`);
  }
  tokenLog.push(entry);
}

// ---------------------------------------------------------------- HTTP helpers

async function readBody(ctx, limit = 65536) {
  const chunks = [];
  let size = 0;
  for await (const chunk of ctx.req) {
    size += chunk.length;
    if (size > limit) {
      ctx.throw(413, 'request body too large');
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function noStore(ctx) {
  ctx.set('cache-control', 'no-store');
}

// ---------------------------------------------------------------- interactions (login, automatic consent)

async function interactions(ctx, next) {
  const match = /^\/interaction\/([^/]+)(\/login)?$/.exec(ctx.path);
  if (!match) {
    return next();
  }
  noStore(ctx);
  const [, uid, login] = match;
  let details;
  try {
    details = await provider.interactionDetails(ctx.req, ctx.res);
  } catch (err) {
    ctx.status = 400;
    ctx.type = 'html';
    ctx.body = page('Error - test OpenID provider', `<h1>Error</h1>
<p id="error">${esc(err.error ?? 'invalid_request')}</p><p id="error_description">${esc(err.error_description ?? err.message)}</p>`);
    return undefined;
  }
  if (details.uid !== uid) {
    ctx.status = 400;
    ctx.body = page('Error - test OpenID provider', '<h1>Error</h1><p id="error">interaction mismatch</p>');
    return undefined;
  }
  const { prompt, params } = details;

  if (!login && ctx.method === 'GET') {
    if (prompt.name === 'login') {
      ctx.type = 'html';
      ctx.body = loginPage(uid, params.client_id);
      return undefined;
    }
    if (prompt.name === 'consent') {
      // consent granted automatically: everything the client asked for
      const { Grant } = provider;
      const grant = details.grantId
        ? await Grant.find(details.grantId)
        : new Grant({ accountId: details.session.accountId, clientId: params.client_id });
      const missing = prompt.details;
      if (missing.missingOIDCScope) {
        grant.addOIDCScope(missing.missingOIDCScope.join(' '));
      }
      if (missing.missingOIDCClaims) {
        grant.addOIDCClaims(missing.missingOIDCClaims);
      }
      if (missing.missingResourceScopes) {
        for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes)) {
          grant.addResourceScope(indicator, scopes.join(' '));
        }
      }
      const grantId = await grant.save();
      ctx.respond = false;
      await provider.interactionFinished(ctx.req, ctx.res, { consent: { grantId } }, { mergeWithLastSubmission: true });
      return undefined;
    }
    ctx.throw(501, `prompt ${prompt.name} is not implemented by this test provider`);
  }

  if (login && ctx.method === 'POST') {
    if (prompt.name !== 'login') {
      ctx.throw(400, `the interaction wants ${prompt.name}, not login`);
    }
    const form = new URLSearchParams(await readBody(ctx));
    const username = (form.get('username') ?? '').trim();
    if (!users.has(username)) {
      log(`login refused: unknown user ${JSON.stringify(username)}`);
      ctx.type = 'html';
      ctx.body = loginPage(uid, params.client_id, {
        username,
        error: username ? `Unknown user "${username}".` : 'Enter a user name.',
      });
      return undefined;
    }
    log(`login: ${username} for ${params.client_id}`);
    ctx.respond = false;
    await provider.interactionFinished(ctx.req, ctx.res, { login: { accountId: username } },
      { mergeWithLastSubmission: false });
    return undefined;
  }

  ctx.throw(405, 'method not allowed');
  return undefined;
}

// ---------------------------------------------------------------- test-admin API

function json(ctx, status, body) {
  noStore(ctx);
  ctx.status = status;
  ctx.type = 'json';
  ctx.body = body;
}

async function jsonBody(ctx) {
  const raw = await readBody(ctx);
  try {
    return raw ? JSON.parse(raw) : {};
  } catch {
    return undefined;
  }
}

async function testAdmin(ctx, next) {
  if (ctx.path !== '/test-admin' && !ctx.path.startsWith('/test-admin/')) {
    return next();
  }
  if (ctx.get('authorization') !== `Bearer ${config.admin_token}`) {
    ctx.set('www-authenticate', 'Bearer realm="test-admin"');
    return json(ctx, 401, { error: 'unauthorized' });
  }
  const user = /^\/test-admin\/users\/([^/]+)$/.exec(ctx.path);
  if (user) {
    const name = decodeURIComponent(user[1]);
    if (ctx.method === 'PUT') {
      const doc = await jsonBody(ctx);
      if (!doc || typeof doc !== 'object' || Array.isArray(doc)) {
        return json(ctx, 400, { error: 'the body must be a JSON object' });
      }
      try {
        putUser(name, doc);
      } catch (err) {
        return json(ctx, 400, { error: err.message });
      }
      log(`admin: user ${name} is now ${JSON.stringify(users.get(name))}`);
      return json(ctx, 200, { name, ...users.get(name) });
    }
    if (ctx.method === 'DELETE') {
      const existed = users.delete(name);
      log(`admin: user ${name} removed`);
      return json(ctx, existed ? 200 : 404, { name, removed: existed });
    }
    if (ctx.method === 'GET') {
      return users.has(name) ? json(ctx, 200, { name, ...users.get(name) }) : json(ctx, 404, { error: 'no such user' });
    }
    return json(ctx, 405, { error: 'method not allowed' });
  }
  if (ctx.path === '/test-admin/mischief') {
    if (ctx.method === 'POST') {
      const doc = await jsonBody(ctx);
      const kind = doc?.next_id_token;
      if (kind !== null && !MISCHIEF_KINDS.has(kind)) {
        return json(ctx, 400, { error: `next_id_token must be null or one of ${[...MISCHIEF_KINDS].join(', ')}` });
      }
      nextMischief = kind;
      log(`admin: next id_token mischief ${kind}`);
      return json(ctx, 200, { next_id_token: nextMischief });
    }
    if (ctx.method === 'GET') {
      return json(ctx, 200, { next_id_token: nextMischief });
    }
    return json(ctx, 405, { error: 'method not allowed' });
  }
  if (ctx.path === '/test-admin/log') {
    if (ctx.method === 'GET') {
      return json(ctx, 200, tokenLog);
    }
    if (ctx.method === 'DELETE') {
      tokenLog.length = 0;
      return json(ctx, 200, []);
    }
    return json(ctx, 405, { error: 'method not allowed' });
  }
  return json(ctx, 404, { error: 'not found' });
}

// ---------------------------------------------------------------- wiring

provider.use(async (ctx, next) => {
  const started = Date.now();
  try {
    await next();
  } finally {
    log(`${ctx.method} ${ctx.path} -> ${ctx.respond === false ? ctx.res.statusCode : ctx.status} (${Date.now() - started} ms)`);
  }
});
provider.use(testAdmin);
provider.use(interactions);
provider.use(async (ctx, next) => (ctx.path === '/token' && ctx.method === 'POST' ? tokenEndpointWatch(ctx, next) : next()));

const server = provider.listen(port, '127.0.0.1', () => {
  process.stdout.write(`READY ${issuer}\n`);
});
server.on('error', (err) => fail(`cannot listen on 127.0.0.1:${port}: ${err.code ?? ''} ${err.message}`));

function stop(signal) {
  log(`${signal}: stopping`);
  server.close(() => process.exit(0));
  server.closeAllConnections?.();
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on('SIGTERM', () => stop('SIGTERM'));
if (process.argv.includes('--exit-with-stdin')) {
  process.stdin.on('end', () => stop('stdin closed'));
  process.stdin.on('error', () => stop('stdin error'));
  process.stdin.resume();
}
process.on('SIGINT', () => stop('SIGINT'));
