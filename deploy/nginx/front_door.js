// njs for nginx.conf: the things plain nginx directives cannot do.
const crypto = require('crypto');
const fs = require('fs');
const querystring = require('querystring');

// $key_digest: the SHA-256 (hex) of the client's key, or "" without one. keys.map lists digests, so
// the keys themselves are stored nowhere. Keys are 256-bit random strings: a fast unsalted hash is
// enough (slow salted hashes are for guessable passwords). The key is the bearer token, or on
// LibreTranslate's routes the api_key field ($body_key, set by libretranslate() below) when sent.
function digest(r) {
    const key = r.variables.body_key || bearerToken(r.headersIn.Authorization || '');
    return key ? crypto.createHash('sha256').update(key).digest('hex') : '';
}

// "Bearer <token>", the scheme in any case. Every step is one pass over the header: the token's
// pattern is one class between anchors, which no input can make backtrack.
function bearerToken(header) {
    const value = header.trim();
    const space = value.indexOf(' ');
    if (space < 0 || value.slice(0, space).toLowerCase() !== 'bearer') {
        return '';
    }
    const token = value.slice(space + 1).trim();
    return /^[A-Za-z0-9._~+\/=-]{16,256}$/.test(token) ? token : '';
}

// The body of a healthy /healthz. `return` would answer before auth_request's probe ran (rewrite
// phase comes before access); a content handler answers after it.
function healthy(r) {
    r.return(200, '{"status": "Healthy"}\n');
}

// GET /health: the same probe, in LibreTranslate's words (its images and compose files call it).
function libretranslateHealthy(r) {
    r.return(200, '{"status": "ok"}\n');
}

// Every answer the client gets is whole (issue 43). Under continuous batching a replica's 200 head
// leaves before its body, so a replica that dies in between leaves a proxied client with a cut
// answer that nginx can no longer send elsewhere. Here the answer is read whole first, through the
// internal location /_replicas/ (replicas.conf; proxy_next_upstream retries what fails before a
// head), and only a whole answer goes out. One that broke off is sent to a replica again, up to
// TRIES attempts within RETRY_WINDOW_MS; then the client gets a 502, never a cut 200. A translation is
// a pure function of its input, so sending it again is safe. Streams ("stream": true) go through
// as they come (@replicas_stream): the client asked for the first sentences before the last.
const TRIES = @@TRIES@@;
const RETRY_WINDOW_MS = @@RETRY_WINDOW_S@@ * 1000;
// Headers that describe the replica's connection, not the answer: nginx sets its own.
// ts_stream_next is TorchServe's own, between its frontend and worker.
const HOP_HEADERS = ['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'ts_stream_next'];

// POST /predictions/zh_en[/<version>], /v1/models/zh_en:predict, /v2/models/zh_en/infer.
async function answer(r) {
    const body = r.requestText || '';
    if (streamed(body)) {
        r.internalRedirect('@replicas_stream');
        return;
    }
    await answerWhole(r, '/_replicas' + r.uri, r.variables.args || '', 422);
}

// LibreTranslate's /translate and /detect, on the keyed stage once the key and its rate are checked
// (@libretranslate): the body libretranslate() rebuilt, to the native route (libretranslate_stage.conf).
async function answerLibretranslate(r) {
    await answerWhole(r, '/_replicas_libretranslate', '', 400);
}

// The body filter of @replicas_stream: a stream cut by a dead replica or worker ends with an explicit
// error line. A stream ends normally with a last buffer. When the replica's connection ends without
// one (it broke off, or stalled past the read timeout), nginx finalizes its side and then sends only
// an empty flush, never a last buffer, and closes the connection: a client would see a truncated
// stream and have to guess. Here that flush, which is the only empty non-last buffer seen after the
// upstream's response time is set, becomes one more NDJSON line and the stream's proper end.
const STREAM_CUT = '{"code": 502, "type": "StreamCut", "message": "The replica answering this stream '
    + 'stopped before its end. The sentences above are complete; send the request again for the rest '
    + '(a translation is the same every time)."}\n';

function endCutStream(r, data, flags) {
    // "0.002, -" while a retried request streams from its second replica: the last one counts.
    const times = (r.variables.upstream_response_time || '-').split(', ');
    const finished = times[times.length - 1] !== '-';
    if (!flags.last && data.length === 0 && finished && r.status === 200) {
        r.warn(`stream from ${r.variables.upstream_addr} cut off; ended with an error line`);
        r.sendBuffer(STREAM_CUT, {last: true});
        return;
    }
    r.sendBuffer(data, {last: flags.last, flush: true});
}

// Only the native route streams, and only with a top-level "stream": true. The search is a literal
// (linear time); the parse runs only on bodies that name the field.
function streamed(body) {
    if (body.indexOf('"stream"') < 0) {
        return false;
    }
    try {
        const parsed = JSON.parse(body);
        return parsed !== null && typeof parsed === 'object' && parsed.stream === true;
    } catch (e) {
        return false;  // not JSON: the replica answers its 400, whole
    }
}

// A subrequest sends the client's body (or the stage's rebuilt one, by proxy_set_body): never a body
// from here, which njs 0.7 cannot resend when nginx retries on the next replica. `lateStatus`: the
// route's status for a refusal that came after the replica's 200 head (see lateError).
async function answerWhole(r, uri, args, lateStatus) {
    const reply = await wholeAnswer(r, uri, args);
    if (reply.parsed === undefined) {
        // nginx's own 502 or 504 (the client's location answers it, with its JSON and Retry-After:
        // json_errors.conf, libretranslate_errors.conf), or every try cut off: a 502, never a cut 200.
        r.return(reply.status);
        return;
    }
    for (const name in reply.headersOut) {
        if (HOP_HEADERS.indexOf(name.toLowerCase()) < 0) {
            r.headersOut[name] = reply.headersOut[name];
        }
    }
    r.return(reply.status === 200 ? lateError(reply.parsed, lateStatus) || 200 : reply.status, reply.text);
}

// The replica's whole answer to this request: {status, text, parsed, headersOut}. `parsed` is
// undefined, and `status` 502 or 504, when none came whole: nginx's own 502/504 (no replica
// answered, or none in time), or every try cut off.
async function wholeAnswer(r, uri, args) {
    const started = Date.now();
    const upstreams = [];
    const statuses = [];
    let workerDied = false;
    for (let attempt = 1; ; attempt++) {
        const reply = await r.subrequest(uri, {method: 'POST', args: args});
        upstreams.push(reply.variables.upstream_addr || '-');
        statuses.push(reply.variables.upstream_status || '-');
        r.variables.door_upstreams = upstreams.join(', ');
        r.variables.door_upstream_statuses = statuses.join(', ');
        const text = reply.responseText || '';
        if (reply.status === 502 || reply.status === 504) {
            return {status: reply.status, parsed: undefined};
        }
        const parsed = parsedJson(text);
        const again = attempt < TRIES && Date.now() - started < RETRY_WINDOW_MS;
        if (workerDiedUnder(reply.status, parsed) && !workerDied && again) {
            // TorchServe's "Worker died." for the requests its worker held: sent once more (a worker
            // restarts in seconds, and another replica may be up). Only once: were the request itself
            // what killed the worker, it takes one more with it, not one per replica.
            workerDied = true;
            r.warn(`worker died under a request at ${upstreams[upstreams.length - 1]}; trying a replica again`);
            continue;
        }
        if (parsed !== undefined) {
            return {status: reply.status, text: text, parsed: parsed, headersOut: reply.headersOut};
        }
        if (!again) {
            r.error(`answer cut off on ${attempt} attempt(s): ${upstreams.join(', ')}`);
            return {status: 502, parsed: undefined};
        }
        r.warn(`answer from ${upstreams[upstreams.length - 1]} cut off; trying a replica again`);
    }
}

// TorchServe answers the requests a dead worker held with "Worker died.": as 507 when it has already
// seen the process end by SIGKILL (exit 137), and as 500 when the worker's socket closed first (the
// same kill, read a moment sooner; TorchServe 0.12's WorkerThread sends "Worker died." with 500 unless the exit
// code is 137). A chaos soak met two 500s at a worker kill, 2026-12-06. Any other 500 passes through.
function workerDiedUnder(status, parsed) {
    return status === 507 || (status === 500 && parsed !== undefined && parsed.message === 'Worker died.');
}

// Every answer a replica gives is one JSON document (handlers/wire: results and errors alike), and
// no proper prefix of a JSON object or array parses: a cut answer never passes for a whole one.
// Returns the parsed document, or undefined for an empty or cut answer.
function parsedJson(text) {
    if (text === '') {
        return undefined;
    }
    try {
        return JSON.parse(text);
    } catch (e) {
        return undefined;
    }
}

// A refusal found while the answer was rendered, after its 200 head had left the replica (a text
// past its time budget: handlers/text/budget.py's TooCostly), comes as an error body under that 200.
// The client gets the error's own status instead: the native body's "code", else the route's
// (LibreTranslate's 400, KServe's 422). No successful answer has a top-level "error", or a "code"
// with "type" and "message".
function lateError(parsed, lateStatus) {
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
        return 0;
    }
    if (typeof parsed.code === 'number' && parsed.code >= 400 && parsed.code < 600
            && typeof parsed.type === 'string' && typeof parsed.message === 'string') {
        return parsed.code;
    }
    return typeof parsed.error === 'string' ? lateStatus : 0;
}

// What a replica reads of a LibreTranslate form (handlers/wire/libretranslate.py); the key and
// anything else a client sends stay here. ROUTE_FIELD names the route: TorchServe hands the handler
// the body, not the path (nor the query string), so the route travels in the body.
const LIBRETRANSLATE_FIELDS = ['q', 'source', 'target', 'format', 'alternatives'];
const ROUTE_FIELD = 'libretranslate';
const BODY_LIMIT = @@BODY_LIMIT_KIB@@ * 1024;  // the replicas' max_request_size, as nginx's own limit
// Bounds on a multipart form, checked before its parts are read: LibreTranslate's fields are six, a
// browser's part header is under 200 bytes, and RFC 2046 caps a boundary at 70 characters.
const MAX_PARTS = 32;
const MAX_PART_HEAD = 1024;  // the header lines of one part, in characters
const MAX_PART_HEADER_LINES = 8;
const MAX_BOUNDARY = 70;

// POST /translate and /detect (libretranslate_stage.conf): read the fields and the key where
// LibreTranslate reads them (app.py, get_req_api_key and translate(): a JSON body, else the query
// string then the form, urlencoded or multipart: werkzeug's request.values looks in the query string
// first), set the key aside in $body_key, and hand @libretranslate the body to send on without it,
// with the route: JSON as JSON, anything else as a multipart form (raw UTF-8: a third of a
// percent-encoded form's size for Chinese text). The client's query string comes from the gate as
// X-Query (libretranslate.conf: it stays out of this request line, and so out of the error log).
//
// Linear time throughout, whatever the input: no pattern here can backtrack over the body (each
// is a literal, or one class between anchors), every search moves forward from where the last
// one ended, and the multipart bounds above hold before a part is read. tests/e2e/
// test_front_door_parsers.py sends the inputs that would break each of these.
function libretranslate(r) {
    // "translate", "detect" or "translate_file": the location matches nothing else
    const route = r.uri.slice(1);
    let request;
    try {
        const query = firstValues(querystring.parse(r.headersIn['X-Query'] || ''));
        if (route === 'translate_file') {
            request = fileRequest(r, query);
        } else {
            request = isJson(r) ? jsonRequest(r.requestText || '', route) : formRequest(r, query, route);
        }
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
    if (route === 'translate_file') {
        r.variables.download_name = request.downloadName;
        r.internalRedirect('@libretranslate_file');
        return;
    }
    r.internalRedirect('@libretranslate');
}

// As Flask's request.is_json: application/json or application/*+json.
function isJson(r) {
    const type = mediaType(r);
    return type === 'application/json' || (type.startsWith('application/') && type.endsWith('+json'));
}

function mediaType(r) {
    return headerParameters(r.headersIn['Content-Type'] || '')[0].toLowerCase();
}

// "value; name=value; name="value"" as [value, {name: value}]: split once on ";", each parameter
// once on its first "=". A quoted value loses its quotes (a boundary or a form field name never
// holds a ";" or an escaped quote).
function headerParameters(header) {
    const pieces = header.split(';');
    const parameters = {};
    for (let i = 1; i < pieces.length; i++) {
        const equals = pieces[i].indexOf('=');
        if (equals < 0) {
            continue;
        }
        const name = pieces[i].slice(0, equals).trim().toLowerCase();
        let value = pieces[i].slice(equals + 1).trim();
        if (value.length >= 2 && value[0] === '"' && value[value.length - 1] === '"') {
            value = value.slice(1, -1);
        }
        if (parameters[name] === undefined) {
            parameters[name] = value;
        }
    }
    return [pieces[0].trim(), parameters];
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
        // File parts are not fields (request.values skips them).
        form = multipartBuffer(r.requestBuffer || Buffer.alloc(0), r.headersIn['Content-Type']).fields;
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

// POST /translate_file (LibreTranslate's translate_file(): a multipart form, the file in "file",
// source and target as fields or in the query string). The file goes to the native route in the
// format its extension names, so a subtitle keeps its cues, a page its markup and a Word file its
// runs; the answer is kept for DOWNLOAD_TTL_S under a random name, for this client only
// (answerLibretranslateFile). A text format must be UTF-8 (a file in GBK gets a 400 that says so);
// .docx and .odt travel as base64 (handlers/text/office.py reads them).
// Extensions as /frontend/settings lists them (libretranslate.conf).
const FILE_FORMATS = {
    '.txt': 'text', '.html': 'html', '.htm': 'html', '.srt': 'srt', '.vtt': 'vtt', '.md': 'markdown',
    '.docx': 'docx', '.odt': 'odt',
};
const BINARY_FORMATS = ['docx', 'odt'];
const FILE_TYPES = {
    text: 'text/plain; charset=utf-8', html: 'text/html; charset=utf-8',
    srt: 'application/x-subrip; charset=utf-8', vtt: 'text/vtt; charset=utf-8',
    markdown: 'text/markdown; charset=utf-8',
    docx: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
    odt: 'application/vnd.oasis.opendocument.text',
};
const DOWNLOAD_DIR = '@@WORKER_DIR@@/downloads';
const DOWNLOAD_TTL_S = @@DOWNLOAD_TTL_S@@;
const DOWNLOADS_KEPT = @@DOWNLOADS_KEPT@@;
const MAX_NAME = 100;  // characters of a download's name

function fileRequest(r, query) {
    if (mediaType(r) !== 'multipart/form-data') {
        throw new Error('Invalid request: missing file parameter');
    }
    const form = multipartBuffer(r.requestBuffer || Buffer.alloc(0), r.headersIn['Content-Type']);
    const fields = Object.assign({}, form.fields, query);
    const file = form.files.file;
    if (file === undefined) {
        throw new Error('Invalid request: missing file parameter');
    }
    ['source', 'target'].forEach((name) => {
        if (!fields[name]) {
            throw new Error('Invalid request: missing ' + name + ' parameter');
        }
    });
    if (file.filename === '') {
        throw new Error('Invalid request: empty file');
    }
    const dot = file.filename.lastIndexOf('.');
    const extension = dot < 0 ? '' : file.filename.slice(dot).toLowerCase();
    const format = FILE_FORMATS[extension];
    if (format === undefined) {
        throw new Error('Invalid request: file format not supported');
    }
    checkLanguage(fields.source, ['auto', 'zh', 'zt', 'zho', 'chi', 'cmn']);
    checkLanguage(fields.target, ['en', 'eng']);
    let content;
    if (BINARY_FORMATS.indexOf(format) >= 0) {
        content = file.bytes.toString('base64');
    } else {
        try {
            content = new TextDecoder('utf-8', {fatal: true}).decode(file.bytes);
        } catch (e) {
            throw new Error('Invalid request: the file is not UTF-8 text');
        }
        content = content.startsWith('\uFEFF') ? content.slice(1) : content;
    }
    return {
        key: fields.api_key || '',
        body: JSON.stringify({text: content, format: format}),
        type: 'application/json',
        downloadName: safeName(file.filename, extension),
    };
}

// A multipart/form-data body, read on its bytes (a file part may be binary): the text fields
// ({name: value}, as UTF-8) and the files ({name: {filename, bytes}}), the first of each name.
// At most MAX_PARTS parts; a part's header is looked for only in its first MAX_PART_HEAD bytes; every
// search moves forward from where the last ended.
function multipartBuffer(body, contentType) {
    const boundary = headerParameters(contentType)[1].boundary || '';
    if (!boundary || boundary.length > MAX_BOUNDARY) {
        throw new Error('Invalid request: multipart/form-data needs a boundary of 1 to '
                        + MAX_BOUNDARY + ' characters');
    }
    const delimiter = Buffer.from('--' + boundary);
    const utf8 = new TextDecoder('utf-8');
    const fields = {};
    const files = {};
    let at = body.indexOf(delimiter);
    for (let parts = 0; at >= 0; parts++) {
        if (parts > MAX_PARTS) {
            throw new Error('Invalid request: multipart form with over ' + MAX_PARTS + ' parts');
        }
        const start = at + delimiter.length;
        if (body[start] === 45 && body[start + 1] === 45) {
            break;  // "--": the closing delimiter
        }
        const next = body.indexOf(delimiter, start);
        const part = body.subarray(start, next < 0 ? body.length : next);
        at = next;
        const end = part.subarray(0, MAX_PART_HEAD + 4).indexOf('\r\n\r\n');
        if (end < 0) {
            if (part.length > MAX_PART_HEAD + 4) {
                throw new Error('Invalid request: multipart part header over ' + MAX_PART_HEAD
                                + ' characters');
            }
            continue;  // no header: not a field
        }
        const field = partField(utf8.decode(part.subarray(0, end)));
        const named = field.file ? files : fields;
        if (field.name === undefined || named[field.name] !== undefined) {
            continue;
        }
        let value = part.subarray(end + 4);
        if (value.length >= 2 && value[value.length - 2] === 13 && value[value.length - 1] === 10) {
            value = value.subarray(0, value.length - 2);
        }
        named[field.name] = field.file ? {filename: field.filename, bytes: value} : utf8.decode(value);
    }
    return {fields: fields, files: files};
}

// A language code as clients send it (any case, - or _, a script or region after it): its first
// subtag must be one of `accepted` (handlers/wire/libretranslate.py reads /translate's codes alike).
function checkLanguage(code, accepted) {
    const first = String(code).split(/[-_]/, 1)[0].toLowerCase();
    if (accepted.indexOf(first) < 0) {
        throw new Error(String(code).slice(0, 40) + ' is not supported');
    }
}

// The client's file name as a download name, as werkzeug's secure_filename makes one (LibreTranslate
// names its downloads so): ASCII letters, digits, "_", "." and "-" only, no leading dot.
function safeName(filename, extension) {
    const base = filename.split(/[\/\\]/).pop().replace(/\s+/g, '_').replace(/[^A-Za-z0-9_.-]/g, '');
    const trimmed = base.replace(/^[._]+/, '').slice(-MAX_NAME);
    return trimmed.toLowerCase().endsWith(extension) ? trimmed : 'file' + extension;
}

// @libretranslate_file: the translation, read whole from a replica (retried as every answer is),
// kept as a download for this client; LibreTranslate's {"translatedFileUrl": ...} or its {"error"}.
async function answerLibretranslateFile(r) {
    const reply = await wholeAnswer(r, '/_replicas_libretranslate', '');
    if (reply.status === 502 || reply.status === 504) {
        r.return(reply.status);  // nginx's own: libretranslate_errors.conf words it
        return;
    }
    const parsed = reply.parsed;
    const failed = reply.status !== 200 ? reply.status : lateError(parsed, 400);
    if (failed) {
        // As /translate: every refusal is LibreTranslate's 400 (over a limit, Japanese text, ...).
        const message = parsed && (parsed.message || parsed.error);
        r.return(failed < 500 ? 400 : failed, JSON.stringify({error: String(message || 'translation failed')}) + '\n');
        return;
    }
    if (typeof parsed.translation !== 'string') {
        r.error('a replica answered /translate_file without a translation');
        r.return(502);
        return;
    }
    const name = r.variables.download_name;
    const id = r.variables.request_id;  // 128 random bits, new for every request
    try {
        if (!keepDownload(id, {client: r.variables.client_id, name: name, format: formatOf(name),
                               expires: Date.now() / 1000 + DOWNLOAD_TTL_S}, parsed.translation)) {
            r.headersOut['Retry-After'] = '60';
            r.return(503, '{"error": "Too many translated files wait for download; try again later"}\n');
            return;
        }
    } catch (e) {
        r.error(`cannot keep a download in ${DOWNLOAD_DIR}: ${e.message}`);
        r.return(500);
        return;
    }
    const url = `${r.headersIn['X-Forwarded-Proto']}://${r.headersIn['X-Forwarded-Host']}/download_file/${id}.${name}`;
    r.return(200, JSON.stringify({translatedFileUrl: url}) + '\n');
}

function formatOf(name) {
    return FILE_FORMATS[name.slice(name.lastIndexOf('.')).toLowerCase()];
}

// Writes <id> (the translation) and <id>.json (whose, its name, when it expires), after removing
// what expired. False when DOWNLOADS_KEPT are still waiting: the directory never grows past it.
function keepDownload(id, meta, translation) {
    try {
        fs.mkdirSync(DOWNLOAD_DIR, {mode: 0o700});
    } catch (e) {
        if (e.code !== 'EEXIST') {
            throw e;
        }
    }
    const now = Date.now() / 1000;
    let waiting = 0;
    fs.readdirSync(DOWNLOAD_DIR).forEach((entry) => {
        if (!entry.endsWith('.json')) {
            return;
        }
        const path = `${DOWNLOAD_DIR}/${entry}`;
        try {
            if (fs.statSync(path).mtimeMs / 1000 + DOWNLOAD_TTL_S < now) {
                fs.unlinkSync(path);
                fs.unlinkSync(path.slice(0, -5));
            } else {
                waiting++;
            }
        } catch (e) {
            // removed meanwhile by another worker
        }
    });
    if (waiting >= DOWNLOADS_KEPT) {
        return false;
    }
    const binary = BINARY_FORMATS.indexOf(meta.format) >= 0;
    fs.writeFileSync(`${DOWNLOAD_DIR}/${id}`, binary ? Buffer.from(translation, 'base64') : translation);
    fs.writeFileSync(`${DOWNLOAD_DIR}/${id}.json`, JSON.stringify(meta));
    return true;
}

// GET /download_file/<id>.<name> (@libretranslate_download, after the key check): the file, to the
// client that asked for it, until it expires. Anything else is a 404, so that no one learns
// whether another client's file exists.
function serveDownload(r) {
    const notFound = '{"error": "Not Found"}\n';
    const match = /^\/download_file\/([0-9a-f]{32})\.([A-Za-z0-9_.-]{1,100})$/.exec(r.uri);
    let meta;
    try {
        meta = match && JSON.parse(fs.readFileSync(`${DOWNLOAD_DIR}/${match[1]}.json`));
    } catch (e) {
        meta = null;
    }
    if (!meta || meta.client !== r.variables.client_id || meta.name !== match[2]
            || meta.expires < Date.now() / 1000) {
        r.return(404, notFound);
        return;
    }
    let content;
    try {
        content = fs.readFileSync(`${DOWNLOAD_DIR}/${match[1]}`);
    } catch (e) {
        r.return(404, notFound);
        return;
    }
    r.headersOut['Content-Type'] = FILE_TYPES[meta.format];
    r.headersOut['Content-Disposition'] = `attachment; filename="${meta.name}"`;
    r.headersOut['Cache-Control'] = 'no-store';
    r.return(200, content);
}

// GET /download_file/...: the key where LibreTranslate's routes take it (api_key in the query
// string, or the bearer token), set aside as libretranslate() does, then checked at
// @libretranslate_download.
function download(r) {
    const query = firstValues(querystring.parse(r.headersIn['X-Query'] || ''));
    r.variables.body_key = query.api_key || '';
    r.internalRedirect('@libretranslate_download');
}

// A repeated field counts once, with its first value (werkzeug's MultiDict.get).
function firstValues(parsed) {
    const fields = {};
    Object.keys(parsed).forEach((name) => {
        fields[name] = Array.isArray(parsed[name]) ? parsed[name][0] : parsed[name];
    });
    return fields;
}

// A part's name, and whether it is a file, from its Content-Disposition header line. A line ends at
// a CR, an LF or both, as anywhere in HTTP parsing.
function partField(head) {
    const lines = head.split(/\r\n|\r|\n/);
    if (lines.length > MAX_PART_HEADER_LINES) {
        throw new Error('Invalid request: multipart part with over ' + MAX_PART_HEADER_LINES
                        + ' header lines');
    }
    for (let i = 0; i < lines.length; i++) {
        const colon = lines[i].indexOf(':');
        if (colon < 0 || lines[i].slice(0, colon).trim().toLowerCase() !== 'content-disposition') {
            continue;
        }
        const parameters = headerParameters(lines[i].slice(colon + 1))[1];
        return {
            name: parameters.name,
            file: parameters.filename !== undefined || parameters['filename*'] !== undefined,
            filename: parameters.filename || '',
        };
    }
    return {name: undefined, file: false, filename: ''};
}

// GET /status/metrics (site.conf, keyed): what the status page plots, as JSON. Each replica's
// Prometheus text comes from its metrics port (loopback, never routed to clients) and is boiled
// down to a few numbers; latency comes from the front door's own log of answered translations
// (TorchServe exports latency only as a running sum, so no percentile can be read from it).
const STATUS_WINDOW_S = 10;  // latency percentiles and requests/s over this many seconds
const LATENCY_TAIL_BYTES = 256 * 1024;  // the log's tail read per call: about 10,000 requests
const REPLICA_NUMBERS = {
    ts_inference_requests_total: 'requests',
    SentenceCacheHits: 'cache_hits',
    SentenceCacheMisses: 'cache_misses',
    QueuedSentences: 'queued_sentences',
    RunningRows: 'running_rows',
};

async function status(r) {
    const targets = (r.variables.status_targets || '').split(' ').filter(Boolean);
    const replicas = await Promise.all(targets.map((target) => replicaStatus(r, target)));
    r.headersOut['Content-Type'] = 'application/json';
    r.headersOut['Cache-Control'] = 'no-store';
    const body = {time: Date.now() / 1000, window_s: STATUS_WINDOW_S,
                  front_door: latency(r.variables.latency_log), replicas: replicas};
    r.return(200, JSON.stringify(body) + '\n');
}

// "r1:12345" (name, metrics port) -> {name, up, requests, cache_hits, ..., workers}, through the
// internal location /_replica_metrics/<port> (site.conf). A subrequest rather than ngx.fetch: njs
// 0.7's fetch waits for the connection to close, and TorchServe keeps it open.
async function replicaStatus(r, target) {
    const name = target.slice(0, target.indexOf(':'));
    const port = target.slice(target.indexOf(':') + 1);
    try {
        const reply = await r.subrequest(`/_replica_metrics/${port}`, {method: 'GET'});
        return reply.status === 200 ? Object.assign({name: name, up: true}, prometheusNumbers(reply.responseText))
                                    : {name: name, up: false};
    } catch (e) {
        return {name: name, up: false};
    }
}

// Sums each wanted metric over its series; counts the workers that have loaded (one WorkerLoadTime
// series per worker name). One pass, one split per line: no pattern runs over the text.
function prometheusNumbers(text) {
    const numbers = {workers: 0};
    Object.values(REPLICA_NUMBERS).forEach((key) => { numbers[key] = 0; });
    text.split('\n').forEach((line) => {
        if (!line || line[0] === '#') {
            return;
        }
        const brace = line.indexOf('{');
        const space = line.lastIndexOf(' ');
        const metric = line.slice(0, brace < 0 ? space : brace);
        const value = Number(line.slice(space + 1));
        if (metric === 'WorkerLoadTime') {
            numbers.workers += 1;
        } else if (REPLICA_NUMBERS[metric] !== undefined && isFinite(value)) {
            numbers[REPLICA_NUMBERS[metric]] += value;
        }
    });
    return numbers;
}

// The latency log (nginx.conf: "<msec> <request_time>" per answered translation): requests and
// p50/p95 in ms over the last STATUS_WINDOW_S seconds, from the file's tail.
function latency(path) {
    const since = Date.now() / 1000 - STATUS_WINDOW_S;
    let text = '';
    try {
        const fd = fs.openSync(path, 'r');
        try {
            const size = fs.fstatSync(fd).size;
            const length = Math.min(size, LATENCY_TAIL_BYTES);
            const buffer = Buffer.alloc(length);
            fs.readSync(fd, buffer, 0, length, size - length);
            text = buffer.toString();
        } finally {
            fs.closeSync(fd);
        }
    } catch (e) {
        return {requests: 0, p50_ms: null, p95_ms: null};
    }
    const times = [];
    text.split('\n').forEach((line) => {
        const fields = line.split(' ');
        const at = fields[0];
        const seconds = fields[1];
        if (Number(at) >= since && isFinite(Number(seconds))) {
            times.push(Number(seconds) * 1000);
        }
    });
    times.sort((a, b) => a - b);
    const rank = (q) => (times.length ? times[Math.min(times.length - 1, Math.floor(q * times.length))] : null);
    return {requests: times.length, p50_ms: rank(0.5), p95_ms: rank(0.95)};
}

export default { answer, answerLibretranslate, answerLibretranslateFile, digest, download, endCutStream, healthy, libretranslate, libretranslateHealthy, serveDownload, status };
