// njs for nginx.conf: the things plain nginx directives cannot do.
const crypto = require('crypto');
const querystring = require('querystring');

// $key_digest: the SHA-256 (hex) of the client's key, or "" without one. keys.map lists digests, so
// the keys themselves are stored nowhere. Keys are 256-bit random strings: a fast unsalted hash is
// enough (slow salted hashes are for guessable passwords). The key is the bearer token, or on
// LibreTranslate's routes the body's api_key ($body_key, set by libretranslate() below) when sent.
function digest(r) {
    const match = /^Bearer +([A-Za-z0-9._~+\/=-]{16,256}) *$/i.exec(r.headersIn.Authorization || '');
    const key = r.variables.body_key || (match ? match[1] : '');
    return key ? crypto.createHash('sha256').update(key).digest('hex') : '';
}

// The body of a healthy /healthz. `return` would answer before auth_request's probe ran (rewrite
// phase comes before access); a content handler answers after it.
function healthy(r) {
    r.return(200, '{"status": "Healthy"}\n');
}

// What a replica reads of a LibreTranslate form (handlers/wire/libretranslate.py); the key and
// anything else a client sends stay here. ROUTE_FIELD names the route: TorchServe hands the handler
// the body, not the path (nor the query string), so the route travels in the body.
const LIBRETRANSLATE_FIELDS = ['q', 'source', 'target', 'format', 'alternatives'];
const ROUTE_FIELD = 'libretranslate';
const BODY_LIMIT = @@BODY_LIMIT_KIB@@ * 1024;  // the replicas' max_request_size, as nginx's own limit

// POST /translate and /detect (libretranslate.conf): read the fields and the key where LibreTranslate
// reads them (app.py, get_req_api_key and translate(): a JSON body, else the query string then the
// form, urlencoded or multipart), set the key aside in $body_key, and hand @libretranslate the body
// to send on without it, with the route: JSON as JSON, anything else as a multipart form (raw
// UTF-8: a third of a percent-encoded form's size for Chinese text).
function libretranslate(r) {
    const route = r.uri.slice(1);  // "translate" or "detect": the location matches nothing else
    let request;
    try {
        const query = firstValues(querystring.parse(r.variables.args || ''));
        if (query.api_key !== undefined) {
            throw new Error('Invalid request: send api_key in the request body or as Authorization: '
                            + 'Bearer <key>, not in the URL (URLs get logged)');
        }
        request = isJson(r) ? jsonRequest(r.requestText || '', route) : formRequest(r, query, route);
        if (Buffer.byteLength(request.body) > BODY_LIMIT) {  // a replica would answer a bare 413
            throw new Error('Invalid request: request body over ' + BODY_LIMIT / 1024 + ' KiB');
        }
    } catch (e) {
        r.return(400, JSON.stringify({error: e.message}) + '\n');
        return;
    }
    r.variables.body_key = request.key;
    r.variables.libretranslate_body = request.body;
    r.variables.libretranslate_type = request.type;
    r.internalRedirect('@libretranslate');
}

// As Flask's request.is_json: application/json or application/*+json.
function isJson(r) {
    const type = mediaType(r);
    return type === 'application/json' || /^application\/.*\+json$/.test(type);
}

function mediaType(r) {
    return (r.headersIn['Content-Type'] || '').split(';')[0].trim().toLowerCase();
}

function jsonRequest(text, route) {
    let fields;
    try {
        fields = JSON.parse(text);
    } catch (e) {
        throw new Error('Failed to decode JSON object: ' + e.message);
    }
    if (fields === null || typeof fields !== 'object' || Array.isArray(fields)) {
        throw new Error('Invalid JSON format');
    }
    const key = fields.api_key;
    delete fields.api_key;
    fields[ROUTE_FIELD] = route;
    return {key: key ? String(key) : '', body: JSON.stringify(fields), type: 'application/json'};
}

function formRequest(r, query, route) {
    const type = mediaType(r);
    const text = r.requestText || '';
    let form = {};
    if (type === 'application/x-www-form-urlencoded') {
        form = firstValues(querystring.parse(text));
    } else if (type === 'multipart/form-data') {
        form = multipartFields(text, r.headersIn['Content-Type']);
    }
    const fields = Object.assign({}, form, query);  // werkzeug's request.values: the query string first
    const kept = LIBRETRANSLATE_FIELDS.filter((name) => fields[name] !== undefined);
    const pairs = kept.map((name) => [name, fields[name]]).concat([[ROUTE_FIELD, route]]);
    // A boundary made from the content cannot occur in it.
    const boundary = 'zh-en-' + crypto.createHash('sha256').update(JSON.stringify(pairs)).digest('hex');
    const parts = pairs.map((pair) => '--' + boundary + '\r\nContent-Disposition: form-data; name="'
                                      + pair[0] + '"\r\n\r\n' + pair[1] + '\r\n');
    return {
        key: fields.api_key || '',
        body: parts.join('') + '--' + boundary + '--\r\n',
        type: 'multipart/form-data; boundary=' + boundary,
    };
}

// A repeated field counts once, with its first value (werkzeug's MultiDict.get).
function firstValues(parsed) {
    const fields = {};
    Object.keys(parsed).forEach((name) => {
        fields[name] = Array.isArray(parsed[name]) ? parsed[name][0] : parsed[name];
    });
    return fields;
}

// The text fields of a multipart/form-data body; file parts are not fields (request.values skips them).
function multipartFields(text, contentType) {
    const match = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
    if (!match) {
        throw new Error('Invalid request: multipart/form-data without a boundary');
    }
    const fields = {};
    text.split('--' + (match[1] || match[2])).slice(1).forEach((part) => {
        const end = part.indexOf('\r\n\r\n');
        if (part.startsWith('--') || end < 0) {
            return;  // the closing delimiter, or no headers
        }
        const head = part.slice(0, end);
        const name = /content-disposition:[^\r\n]*;\s*name="([^"]*)"/i.exec(head);
        if (name && !/;\s*filename\*?=/i.test(head) && fields[name[1]] === undefined) {
            fields[name[1]] = part.slice(end + 4).replace(/\r\n$/, '');
        }
    });
    return fields;
}

export default { digest, healthy, libretranslate };
