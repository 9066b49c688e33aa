// njs for nginx.conf: the two things plain nginx directives cannot do.
const crypto = require('crypto');

// $key_digest: the SHA-256 (hex) of the client's bearer token, or "" without one. keys.map lists
// digests, so the keys themselves are stored nowhere. Keys are 256-bit random strings: a fast
// unsalted hash is enough (slow salted hashes are for guessable passwords).
function digest(r) {
    const match = /^Bearer +([A-Za-z0-9._~+\/=-]{16,256}) *$/i.exec(r.headersIn.Authorization || '');
    return match ? crypto.createHash('sha256').update(match[1]).digest('hex') : '';
}

// The body of a healthy /healthz. `return` would answer before auth_request's probe ran (rewrite
// phase comes before access); a content handler answers after it.
function healthy(r) {
    r.return(200, '{"status": "Healthy"}\n');
}

export default { digest, healthy };
