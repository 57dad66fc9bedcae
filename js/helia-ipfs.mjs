// The embedded IPFS node: Helia (ipfs/helia) behind the subset of kubo's HTTP RPC API
// (`/api/v0/...`) and read-only gateway (`/ipfs/...`, `/ipns/...`) that odf-node uses.
//
// Started by node/ipfs/embedded.py through js/lifeline.mjs, with IPFS_PATH naming the repo.
// `$IPFS_PATH/config.json` (written by embedded.py) gives the API and gateway ports (always on
// 127.0.0.1), the swarm listen and announce multiaddrs, and whether IPNS records travel over
// pubsub. The repo holds `helia/blocks/` (blockstore-fs) and `helia/datastore/` (datastore-fs:
// pins, the node's key, IPNS records), so pins and the peer id survive restarts.
//
// Network: libp2p with TCP + noise + yamux, identify, ping, and (with `pubsub`) floodsub and
// libp2p-fetch for IPNS. No bootstrap, no MDNS, no DHT, no delegated routing, no trustless
// gateways, no relay, AutoNAT, UPnP or WebRTC: Helia's `createHelia()` defaults are not used
// (they add all of these); the node is composed from `createHeliaLight`, `withLibp2pLight` and
// `withBitswap`. It dials only what `swarm/connect` names. Which RPC calls exist and how they
// answer is documented in docs/ipfs.md.

// Node.js 20 lacks Promise.withResolvers (Node >= 22), which libp2p 3 and Helia 7 use.
if (typeof Promise.withResolvers !== 'function') {
  Promise.withResolvers = function withResolvers () {
    let resolve, reject
    const promise = new this((res, rej) => { resolve = res; reject = rej })
    return { promise, resolve, reject }
  }
}

const fs = await import('node:fs')
const http = await import('node:http')
const path = await import('node:path')
const { setImmediate: setImmediatePromise } = await import('node:timers/promises')
const { default: Busboy } = await import('busboy')
const { createHeliaLight } = await import('helia')
const { withLibp2pLight } = await import('@helia/libp2p')
const { withBitswap } = await import('@helia/bitswap')
const { unixfs } = await import('@helia/unixfs')
const { createUnsafe } = await import('multiformats/block')
const { ipns, pubSubIPNSRouting } = await import('@helia/ipns')
const { tcp } = await import('@libp2p/tcp')
const { noise } = await import('@libp2p/noise')
const { yamux } = await import('@libp2p/yamux')
const { identify } = await import('@libp2p/identify')
const { ping } = await import('@libp2p/ping')
const { floodsub } = await import('@libp2p/floodsub')
const { fetch: libp2pFetch } = await import('@libp2p/fetch')
const { peerIdFromPublicKey } = await import('@libp2p/peer-id')
const { publicKeyToProtobuf } = await import('@libp2p/crypto/keys')
const { multiaddr } = await import('@multiformats/multiaddr')
const { FsBlockstore } = await import('blockstore-fs')
const { NextToLast } = await import('blockstore-fs/sharding')
const { FsDatastore } = await import('datastore-fs')
const { CID } = await import('multiformats/cid')
const { sha256 } = await import('multiformats/hashes/sha2')
const { base32 } = await import('multiformats/bases/base32')
const { base58btc } = await import('multiformats/bases/base58')
const { fixedSize } = await import('ipfs-unixfs-importer/chunker')
const { balanced } = await import('ipfs-unixfs-importer/layout')

const VERSION = JSON.parse(fs.readFileSync(new URL('./node_modules/helia/package.json', import.meta.url))).version
const repo = process.env.IPFS_PATH
if (!repo) {
  console.error('IPFS_PATH is not set')
  process.exit(2)
}
const config = JSON.parse(fs.readFileSync(path.join(repo, 'config.json'), 'utf8'))

// UnixFS import settings: those of js-ipfs 0.66, the node this one replaces (256 KiB fixed-size
// chunks, balanced DAG of at most 174 links per node, and directories never HAMT-sharded: js-ipfs
// shards only with its experimental `sharding` option, which odf-node never set), so the same
// bytes keep the same CIDs (tests/integration/test_ipfs_cids.py). kubo's `ipfs add` differs only
// for directories whose links exceed 256 KiB, which it shards (docs/ipfs.md). Helia's
// `unixfs-v1-2025` profile (1 MiB chunks, 1024 links) would change every multi-chunk CID.
const CHUNK_SIZE = 262144
const MAX_CHILDREN = 174
const SHARD_SPLIT_BYTES = Infinity

const CODECS = { raw: 0x55, 'dag-pb': 0x70, 'dag-cbor': 0x71, 'dag-json': 0x0129 }

// The blockstore's own default file layout, held here so that dag/export reads block files directly.
const SHARDING = new NextToLast()
const BLOCKS_DIR = path.join(repo, 'helia', 'blocks')
const blockstore = new FsBlockstore(BLOCKS_DIR, { shardingStrategy: SHARDING })
const datastore = new FsDatastore(path.join(repo, 'helia', 'datastore'))
await blockstore.open()
await datastore.open()

const services = { identify: identify(), ping: ping() }
if (config.pubsub) {
  services.pubsub = floodsub()
  services.fetch = libp2pFetch()
}
const helia = withBitswap(withLibp2pLight(createHeliaLight({ blockstore, datastore }), {
  addresses: { listen: config.swarm, announce: config.announce ?? [] },
  transports: [tcp()],
  connectionEncrypters: [noise()],
  streamMuxers: [yamux()],
  peerDiscovery: [],
  services
}))
await helia.start()
const libp2p = helia.libp2p
const fsys = unixfs(helia)

// dag/export: a CARv1 of every block of the DAG under a root, breadth first. @helia/car's
// exporters read one block at a time through a sorted queue (its UnixFS one also looks each child
// up in its parent's links, quadratic in a directory's size), and its CarWriter hands every
// section over in two chunks, each awaited by the reader: ~1,100 blocks/s for a dataset's
// 1,000-entry blocks/ directory. Here a level's blocks go in batches of EXPORT_BATCH: those this
// node holds are read straight from their files, the others through Helia (bitswap) all at
// once, and each batch's sections are written as one buffer. kubo's dag export is this walk too
// (any order is a valid CARv1).
const EXPORT_BATCH = 64
const RAW_CODE = 0x55
const DAG_PB_CODE = 0x70
const IDENTITY_HASH = 0x00
// Local block files are read synchronously, in slices of at most this many milliseconds between
// turns of the event loop, into one buffer per export (open, read, close: no stat, no buffer per
// block). Per small block that costs under a third of an `fs.readFile` (which makes four
// thread-pool round trips) and a sixth of blockstore-fs's `get` (which opens the file and streams
// it): 1,000 blocks of ~300 bytes took ~6, 20 and 88 ms. A slow disk delays the loop by at most
// one slice and one file.
const EXPORT_SLICE_MS = 4
const EXPORT_SCRATCH = 1 << 20

async function blockBytes (value) {
  if (value instanceof Uint8Array) return value
  const parts = []
  let size = 0
  for await (const part of value) { parts.push(part); size += part.length }
  if (parts.length === 1) return parts[0]
  const out = new Uint8Array(size)
  let at = 0
  for (const part of parts) { out.set(part, at); at += part.length }
  return out
}

const BASE32_UPPER = Buffer.from('ABCDEFGHIJKLMNOPQRSTUVWXYZ234567')

/** The file of a block under this node's blockstore, from its multihash, as the blockstore's
 * NextToLast layout names it: `<last two characters>/<multibase base32upper>.data`. */
function blockFile (multihash) {
  const out = Buffer.allocUnsafe(1 + Math.ceil(multihash.length * 8 / 5))
  out[0] = 0x42 // 'B', the multibase prefix of base32upper
  let at = 1
  let bits = 0
  let value = 0
  for (let i = 0; i < multihash.length; i++) {
    value = ((value & 0xff) << 8) | multihash[i]
    bits += 8
    while (bits >= 5) { out[at++] = BASE32_UPPER[(value >>> (bits - 5)) & 31]; bits -= 5 }
  }
  if (bits > 0) out[at++] = BASE32_UPPER[(value << (5 - bits)) & 31]
  const name = out.latin1Slice(0, at)
  return `${name.substring(name.length - 2)}/${name}.data`
}

{ // the blockstore's own names, checked once at start (an upgrade could change its layout)
  const probe = CID.parse('bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku')
  const { dir, file } = SHARDING.encode(probe)
  if (blockFile(probe.multihash.bytes) !== `${dir}/${file}`) {
    throw new Error('blockstore-fs names block files differently from dag/export')
  }
}

/** What the export walks: a block's CID (its bytes, codec, a CID object once one is needed),
 * its file under this node's blockstore, and whether the CID is an identity one (its bytes
 * inline: no block to export, as in @helia/car). */
function exportEntry (cid) {
  const identity = cid.multihash.code === IDENTITY_HASH
  return { bytes: cid.bytes, code: cid.code, identity, file: identity ? '' : blockFile(cid.multihash.bytes), cid }
}

function entryCid (entry) {
  entry.cid ??= CID.decode(entry.bytes)
  return entry.cid
}

let varintEnd = 0 // where the last varint readVarint read ends

/** The unsigned varint at `pos` (its end in `varintEnd`), or -1 past the end or too long. */
function readVarint (buf, pos) {
  let value = 0
  let scale = 1
  for (;;) {
    if (pos >= buf.length || scale > 2 ** 49) return -1
    const b = buf[pos++]
    value += (b & 0x7f) * scale
    if (!(b & 0x80)) break
    scale *= 128
  }
  varintEnd = pos
  return value
}

/** An export entry from a CID's bytes, without a CID object (undefined: not a CIDv0 or a
 * well-formed CIDv1). */
function entryFromBytes (bytes) {
  if (bytes.length === 34 && bytes[0] === 0x12 && bytes[1] === 0x20) { // CIDv0: sha2-256
    return { bytes, code: DAG_PB_CODE, identity: false, file: blockFile(bytes), cid: undefined }
  }
  if (readVarint(bytes, 0) !== 1) return undefined
  const code = readVarint(bytes, varintEnd)
  const multihash = varintEnd
  const hashCode = code < 0 ? -1 : readVarint(bytes, multihash)
  const digestLength = hashCode < 0 ? -1 : readVarint(bytes, varintEnd)
  if (digestLength < 0 || varintEnd + digestLength !== bytes.length) return undefined
  const identity = hashCode === IDENTITY_HASH
  const file = identity ? '' : blockFile(bytes.subarray(multihash))
  return { bytes, code, identity, file, cid: undefined }
}

/** The links of a dag-pb node as export entries, read straight from its protobuf fields
 * (PBNode: Data 1, Links 2; PBLink: Hash 1, Name 2, Tsize 3). The codec's decoder builds a CID
 * object, a name string and a link object per link, ~4 us a link: a third of the export of a
 * 10,000-entry directory. Undefined for anything else (the codec's decoder then reads it). */
function dagPbLinks (buf) {
  const out = []
  let pos = 0
  while (pos < buf.length) {
    const key = readVarint(buf, pos)
    const length = key < 0 ? -1 : readVarint(buf, varintEnd)
    if (length < 0 || varintEnd + length > buf.length) return undefined
    pos = varintEnd
    const end = pos + length
    if (key === 0x12) { // a link
      let hash
      while (pos < end) {
        const field = readVarint(buf, pos)
        if (field === 0x18) { // Tsize, a varint
          if (readVarint(buf, varintEnd) < 0) return undefined
          pos = varintEnd
          continue
        }
        if (field !== 0x0a && field !== 0x12) return undefined
        const n = readVarint(buf, varintEnd)
        if (n < 0 || varintEnd + n > end) return undefined
        if (field === 0x0a) hash = buf.subarray(varintEnd, varintEnd + n)
        pos = varintEnd + n
      }
      const entry = pos === end && hash !== undefined ? entryFromBytes(hash) : undefined
      if (entry === undefined) return undefined
      out.push(entry)
    } else if (key !== 0x0a) { // not the node's data either
      return undefined
    }
    pos = end
  }
  return out
}

/** The bytes of a block this node holds, read from its file into `scratch` at `at` (a view of
 * them), or into a buffer of its own when longer than the room left; undefined if the node
 * holds no such block. A read shorter than the room asked for is the file's end. */
function localBlockSync (file, scratch, at) {
  if (file === '') return undefined // an identity CID: Helia answers it from the CID itself
  let fd
  try {
    fd = fs.openSync(`${BLOCKS_DIR}/${file}`, 'r')
  } catch (err) {
    if (err.code === 'ENOENT') return undefined
    throw err
  }
  try {
    const room = scratch.length - at
    const n = room > 0 ? fs.readSync(fd, scratch, at, room, 0) : 0
    if (n < room) return scratch.subarray(at, at + n)
    return fs.readFileSync(fd)
  } finally {
    fs.closeSync(fd)
  }
}

/** The bytes of a batch's blocks: this node's from its files into `scratch` (yielding to the
 * event loop every EXPORT_SLICE_MS), any other through Helia (bitswap), concurrently. */
async function batchBytes (batch, scratch, options) {
  const out = new Array(batch.length)
  const missing = []
  let at = 0
  let sliceStart = performance.now()
  for (let i = 0; i < batch.length; i++) {
    if (performance.now() - sliceStart > EXPORT_SLICE_MS) {
      await setImmediatePromise()
      options.signal?.throwIfAborted()
      sliceStart = performance.now()
    }
    const bytes = localBlockSync(batch[i].file, scratch, at)
    if (bytes === undefined) {
      missing.push(i)
    } else {
      out[i] = bytes
      if (bytes.buffer === scratch.buffer) at += bytes.length
    }
  }
  await Promise.all(missing.map(async (i) => {
    out[i] = await blockBytes(helia.blockstore.get(entryCid(batch[i]), options))
  }))
  return out
}

/** The export entries of the blocks a block links to: a dag-pb node's (UnixFS: a directory of
 * thousands of entries) read from its fields; any other codec's through its decoder and
 * multiformats' generic `links()`. */
async function blockLinks (entry, bytes) {
  if (entry.code === DAG_PB_CODE) {
    const links = dagPbLinks(bytes)
    if (links !== undefined) return links
  }
  const codec = await helia.getCodec(entry.code)
  if (entry.code === DAG_PB_CODE) return codec.decode(bytes).Links.map(link => exportEntry(link.Hash))
  const block = createUnsafe({ cid: entryCid(entry), bytes, codec })
  return Array.from(block.links(), ([, link]) => exportEntry(link))
}

function varintLength (n) {
  let len = 1
  while (n >= 0x80) { n = Math.floor(n / 128); len++ }
  return len
}

function writeVarint (buf, at, n) {
  while (n >= 0x80) { buf[at++] = (n % 128) | 0x80; n = Math.floor(n / 128) }
  buf[at++] = n
  return at
}

/** The CARv1 header `varint(len) || dag-cbor {roots: [root], version: 1}` (the map's keys in
 * dag-cbor's order, shorter first; the CID as tag 42 over a byte string with a 0x00 prefix). */
function carHeader (root) {
  const cid = root.bytes
  const body = Buffer.concat([
    Buffer.from([0xa2, 0x65]), Buffer.from('roots'), Buffer.from([0x81, 0xd8, 0x2a]),
    cborByteStringHead(cid.length + 1), Buffer.from([0x00]), cid,
    Buffer.from([0x67]), Buffer.from('version'), Buffer.from([0x01])
  ])
  const out = Buffer.allocUnsafe(varintLength(body.length) + body.length)
  body.copy(out, writeVarint(out, 0, body.length))
  return out
}

function cborByteStringHead (n) {
  if (n < 24) return Buffer.from([0x40 | n])
  if (n < 256) return Buffer.from([0x58, n])
  return Buffer.from([0x59, n >> 8, n & 0xff])
}

/** The CAR sections `varint(len) || CID || bytes` of a batch, in one buffer. */
function carSections (batch, blocks) {
  let size = 0
  for (let i = 0; i < batch.length; i++) {
    const len = batch[i].bytes.length + blocks[i].length
    size += varintLength(len) + len
  }
  const out = Buffer.allocUnsafe(size)
  let at = 0
  for (let i = 0; i < batch.length; i++) {
    const cid = batch[i].bytes
    at = writeVarint(out, at, cid.length + blocks[i].length)
    out.set(cid, at)
    at += cid.length
    out.set(blocks[i], at)
    at += blocks[i].length
  }
  return out
}

/** The CARv1 of the DAG under `root`, in one chunk per batch of blocks. The root is read before
 * anything is yielded, so an absent root is still an HTTP error, not a cut stream. */
async function * exportCar (root, options) {
  // Blocks already queued, by file (a raw leaf) or codec and file: the file's name is the
  // multihash, which two links with different codecs may share.
  const first = exportEntry(root)
  const seen = new Set([root.code === RAW_CODE ? first.file : `${root.code}:${first.file}`])
  let level = [first]
  let header = carHeader(root)
  // Blocks are read into it, and copied out into the batch's sections before the next batch.
  const scratch = Buffer.allocUnsafeSlow(EXPORT_SCRATCH)
  while (level.length > 0) {
    const next = []
    for (let i = 0; i < level.length; i += EXPORT_BATCH) {
      options.signal?.throwIfAborted()
      const batch = level.slice(i, i + EXPORT_BATCH)
      const blocks = await batchBytes(batch, scratch, options)
      if (header != null) { yield header; header = null }
      for (let j = 0; j < batch.length; j++) {
        if (batch[j].code === RAW_CODE) continue
        // A copy: the links' CID bytes are views of these bytes, and the scratch is reused.
        const bytes = blocks[j].buffer === scratch.buffer ? Buffer.from(blocks[j]) : blocks[j]
        for (const link of await blockLinks(batch[j], bytes)) {
          if (link.identity) continue
          const key = link.code === RAW_CODE ? link.file : `${link.code}:${link.file}`
          if (!seen.has(key)) { seen.add(key); next.push(link) }
        }
      }
      yield carSections(batch, blocks)
    }
    level = next
  }
}
const names = ipns(helia, { routers: config.pubsub ? [pubSubIPNSRouting(helia)] : [] })

class HttpError extends Error {
  constructor (status, message) {
    super(message)
    this.status = status
  }
}

/** Go-style duration (`60000ms`, `10s`, `1m`) in milliseconds, or undefined. */
function durationMs (text) {
  const m = /^([0-9.]+)(ms|s|m|h)?$/.exec(text ?? '')
  if (!m) return undefined
  return Number(m[1]) * { ms: 1, s: 1000, m: 60000, h: 3600000 }[m[2] ?? 's']
}

function bool (value, dflt) {
  if (value == null || value === '') return dflt
  return value === 'true' || value === '1'
}

function cidString (cid, base) {
  if (cid.version === 0) return cid.toString()
  return base === 'base58btc' ? cid.toString(base58btc) : cid.toString(base32)
}

/** Resolve `/ipfs/<cid>/a/b`, `/ipns/<name>/a/b` or `<cid>/a/b` to `{ cid, path }`. */
async function splitPath (arg, signal) {
  if (!arg) throw new HttpError(400, 'argument "ipfs-path" is required')
  let p = arg.replace(/^\/+/, '')
  if (p.startsWith('ipns/')) {
    const [, name, ...rest] = p.split('/')
    const target = await resolveName(name, signal)
    p = target.replace(/^\/+/, '').replace(/^ipfs\//, '') + (rest.length ? '/' + rest.join('/') : '')
  } else if (p.startsWith('ipfs/')) {
    p = p.slice(5)
  }
  const [first, ...rest] = p.split('/').filter(s => s !== '')
  let cid
  try {
    cid = CID.parse(first)
  } catch {
    throw new HttpError(400, `invalid path "${arg}": not a CID`)
  }
  return { cid, path: rest.join('/') }
}

async function resolveName (name, signal) {
  let last
  try {
    // A bare name (`12D3Koo…` peer id or `k51…` CID) is given to Helia as an `/ipns/` path.
    const key = name.startsWith('/ipns/') ? name : `/ipns/${name}`
    for await (const r of names.resolve(key, { signal })) last = r.value
  } catch (e) {
    throw new HttpError(500, `could not resolve name: ${e.message}`)
  }
  if (last == null) throw new HttpError(500, 'could not resolve name')
  return last
}

/** The CID at `{ cid, path }` (walks directories). */
async function resolveCid (target, signal) {
  if (!target.path) return target.cid
  const stat = await fsys.stat(target.cid, { path: target.path, signal })
  return stat.cid
}

function writeJson (res, objects) {
  res.writeHead(200, { 'Content-Type': 'application/json' })
  for (const o of objects) res.write(JSON.stringify(o) + '\n')
  res.end()
}

/** Stream an async iterable; the first chunk is read before the status line is sent, so an
 * error while locating the content is still an HTTP error. */
async function writeStream (res, source, contentType = 'application/octet-stream') {
  const it = source[Symbol.asyncIterator]()
  const first = await it.next()
  res.writeHead(200, { 'Content-Type': contentType })
  if (!first.done) {
    if (!res.write(first.value)) await new Promise(resolve => res.once('drain', resolve))
    for (;;) {
      const next = await it.next()
      if (next.done) break
      if (!res.write(next.value)) await new Promise(resolve => res.once('drain', resolve))
    }
  }
  res.end()
}

/** The parts of a multipart/form-data body as `{ path, content? }` import candidates, one
 * at a time: a part's body is read by the importer before the next part is parsed. */
function multipartCandidates (req) {
  const queue = []
  let wake = null
  let done = false
  let failure = null
  const push = () => { if (wake) { wake(); wake = null } }
  const bb = Busboy({ headers: req.headers, limits: { fieldSize: 1 << 20 } })
  bb.on('file', (_name, stream, info) => {
    let filename = info.filename ?? 'file'
    try { filename = decodeURIComponent(filename) } catch {}
    if (info.mimeType === 'application/x-directory') {
      stream.resume()
      queue.push({ path: filename })
    } else {
      queue.push({ path: filename, content: stream })
    }
    push()
  })
  bb.on('close', () => { done = true; push() })
  bb.on('error', (e) => { failure = e; push() })
  req.pipe(bb)
  return (async function * () {
    for (;;) {
      if (failure) throw new HttpError(400, `bad multipart body: ${failure.message}`)
      if (queue.length) { yield queue.shift(); continue }
      if (done) return
      await new Promise(resolve => { wake = resolve })
    }
  })()
}

async function readFirstPart (req) {
  for await (const c of multipartCandidates(req)) {
    if (!c.content) continue
    const chunks = []
    for await (const b of c.content) chunks.push(b)
    return Buffer.concat(chunks)
  }
  throw new HttpError(400, 'file argument "data" is required')
}

const commands = {
  async id () {
    const addrs = libp2p.getMultiaddrs().map(a => a.toString())
    return [{
      ID: libp2p.peerId.toString(),
      PublicKey: Buffer.from(publicKeyToProtobuf(libp2p.peerId.publicKey)).toString('base64'),
      Addresses: addrs,
      AgentVersion: `helia/${VERSION}`,
      Protocols: libp2p.getProtocols()
    }]
  },

  async version () {
    return [{ Version: VERSION, Commit: '', Repo: '', System: `${process.arch}/${process.platform}`, Golang: '', Agent: `helia/${VERSION}` }]
  },

  async 'swarm/addrs/local' () {
    const own = `/p2p/${libp2p.peerId.toString()}`
    return [{ Strings: libp2p.getMultiaddrs().map(a => a.toString().replace(own, '')) }]
  },

  async 'swarm/connect' (q, { signal }) {
    const out = []
    for (const arg of q.getAll('arg')) {
      try {
        const conn = await libp2p.dial(multiaddr(arg), { signal })
        out.push(`connect ${conn.remotePeer.toString()} success`)
      } catch (e) {
        throw new HttpError(500, `connect ${arg} failure: ${e.message}`)
      }
    }
    return [{ Strings: out }]
  },

  async 'swarm/peers' () {
    return [{
      Peers: libp2p.getConnections().map(c => ({
        Addr: c.remoteAddr.decapsulateCode(421).toString(),
        Peer: c.remotePeer.toString(),
        Direction: c.direction === 'inbound' ? 2 : 1
      }))
    }]
  },

  async 'block/put' (q, { req, signal }) {
    const data = await readFirstPart(req)
    const codecName = q.get('cid-codec') || q.get('format') || 'raw'
    const codec = CODECS[codecName === 'v0' || codecName === 'protobuf' ? 'dag-pb' : codecName]
    if (codec == null) throw new HttpError(400, `unsupported codec ${codecName}`)
    const mh = q.get('mhtype') || 'sha2-256'
    if (mh !== 'sha2-256') throw new HttpError(400, `unsupported hash ${mh}`)
    const cid = CID.createV1(codec, await sha256.digest(data))
    await helia.blockstore.put(cid, data, { signal })
    if (bool(q.get('pin'), false)) await drain(helia.pins.add(cid, { signal }))
    return [{ Key: cidString(cid, q.get('cid-base')), Size: data.length }]
  },

  async 'block/get' (q, { res, signal }) {
    const cid = CID.parse(q.get('arg') ?? '')
    const chunks = []
    for await (const c of helia.blockstore.get(cid, { signal })) chunks.push(c)
    await writeStream(res, chunks)
  },

  async 'pin/add' (q, { signal }) {
    const cid = await resolveCid(await splitPath(q.get('arg'), signal), signal)
    const depth = bool(q.get('recursive'), true) ? Infinity : 0
    if (!(await helia.pins.isPinned(cid, { signal }))) {
      await drain(helia.pins.add(cid, { depth, signal }))
    }
    return [{ Pins: [cid.toString()] }]
  },

  async ls (q, { signal }) {
    const out = []
    for (const arg of q.getAll('arg')) {
      const cid = await resolveCid(await splitPath(arg, signal), signal)
      const links = []
      for await (const e of fsys.ls(cid, { signal })) {
        links.push({ Name: e.name, Hash: e.cid.toString(), Size: Number(e.size ?? 0), Type: 0, Target: '' })
      }
      // kubo's Type: 1 directory, 2 file (0 unknown with resolve-type=false). A raw leaf is a
      // file; a dag-pb child is read (one block, as kubo does) to tell.
      if (bool(q.get('resolve-type'), true)) {
        for (const link of links) {
          const child = CID.parse(link.Hash)
          link.Type = child.code === CODECS.raw ? 2 : ((await fsys.stat(child, { signal })).type === 'directory' ? 1 : 2)
        }
      }
      out.push({ Hash: arg, Links: links })
    }
    return [{ Objects: out }]
  },

  async cat (q, { res, signal }) {
    const target = await splitPath(q.get('arg'), signal)
    const offset = q.get('offset') ? Number(q.get('offset')) : undefined
    const length = q.get('length') ? Number(q.get('length')) : undefined
    await writeStream(res, fsys.cat(target.cid, { path: target.path || undefined, offset, length, signal }))
  },

  async 'dag/export' (q, { res, signal }) {
    const cid = await resolveCid(await splitPath(q.get('arg'), signal), signal)
    await writeStream(res, exportCar(cid, { signal }), 'application/vnd.ipld.car')
  },

  async add (q, { req, signal }) {
    const cidVersion = Number(q.get('cid-version') ?? 0)
    const rawLeaves = bool(q.get('raw-leaves'), cidVersion === 1)
    let chunkSize = CHUNK_SIZE
    const chunker = q.get('chunker')
    if (chunker) {
      const m = /^size-([0-9]+)$/.exec(chunker)
      if (!m) throw new HttpError(400, `unsupported chunker ${chunker}`)
      chunkSize = Number(m[1])
    }
    const hash = q.get('hash')
    if (hash && hash !== 'sha2-256') throw new HttpError(400, `unsupported hash ${hash}`)
    const entries = []
    for await (const entry of fsys.addAll(multipartCandidates(req), {
      cidVersion,
      rawLeaves,
      reduceSingleLeafToSelf: true,
      chunker: fixedSize({ chunkSize }),
      layout: balanced({ maxChildrenPerNode: MAX_CHILDREN }),
      shardSplitThresholdBytes: SHARD_SPLIT_BYTES,
      shardSplitStrategy: 'links-bytes',
      wrapWithDirectory: bool(q.get('wrap-with-directory'), false),
      // One file at a time: a part's bytes arrive only after the previous part was read.
      fileImportConcurrency: 1,
      signal
    })) {
      entries.push(entry)
    }
    if (bool(q.get('pin'), true)) {
      for (const e of entries) {
        if (!e.path.includes('/') && !(await helia.pins.isPinned(e.cid, { signal }))) {
          await drain(helia.pins.add(e.cid, { signal }))
        }
      }
    }
    const base = q.get('cid-base')
    return entries.map(e => ({ Name: e.path, Hash: cidString(e.cid, base), Size: String(e.size ?? 0) }))
  },

  async 'name/publish' (q, { signal }) {
    const value = q.get('arg')
    if (!value) throw new HttpError(400, 'argument "ipfs-path" is required')
    const key = q.get('key') || 'self'
    const options = { signal }
    const ttl = durationMs(q.get('ttl'))
    if (ttl != null) options.ttl = ttl
    const lifetime = durationMs(q.get('lifetime'))
    if (lifetime != null) options.lifetime = lifetime
    let result
    try {
      result = await names.publish(key, value, { ...options, offline: !config.pubsub })
    } catch (e) {
      // Published to the local store first; pubsub with no subscriber yet is not a failure
      // when the caller allows offline publishing (as kubo's `allow-offline`).
      if (!bool(q.get('allow-offline'), false)) throw e
      result = await names.publish(key, value, { ...options, offline: true })
    }
    return [{ Name: peerIdFromPublicKey(result.publicKey).toString(), Value: value }]
  },

  async 'name/resolve' (q, { signal }) {
    const name = (q.get('arg') ?? '').replace(/^\/ipns\//, '')
    if (!name) throw new HttpError(400, 'argument "name" is required')
    return [{ Path: await resolveName(name, signal) }]
  }
}

async function drain (it) {
  for await (const _ of it) {} // eslint-disable-line no-unused-vars
}

function errorStatus (e) {
  if (e instanceof HttpError) return e.status
  return 500
}

function abortSignal (req, res, q) {
  const controller = new AbortController()
  res.on('close', () => controller.abort(new Error('request closed')))
  const ms = durationMs(q?.get('timeout'))
  return ms ? AbortSignal.any([controller.signal, AbortSignal.timeout(ms)]) : controller.signal
}

function fail (res, e) {
  if (res.headersSent) {
    res.destroy(e)
    return
  }
  const status = errorStatus(e)
  res.writeHead(status, { 'Content-Type': 'application/json' })
  res.end(JSON.stringify({ Message: String(e?.message ?? e), Code: 0, Type: 'error' }) + '\n')
}

const api = http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://127.0.0.1')
  const q = url.searchParams
  const signal = abortSignal(req, res, q)
  try {
    if (!url.pathname.startsWith('/api/v0/')) throw new HttpError(404, '404 page not found')
    if (req.method !== 'POST') throw new HttpError(405, 'method not allowed')
    const handler = commands[url.pathname.slice('/api/v0/'.length).replace(/\/$/, '')]
    if (!handler) throw new HttpError(404, `unknown command ${url.pathname}`)
    const out = await handler(q, { req, res, signal })
    if (out !== undefined) writeJson(res, out)
  } catch (e) {
    fail(res, e)
  }
})

const gateway = http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://127.0.0.1')
  const signal = abortSignal(req, res, null)
  try {
    if (req.method !== 'GET' && req.method !== 'HEAD') throw new HttpError(405, 'method not allowed')
    if (!/^\/ip[fn]s\//.test(url.pathname)) throw new HttpError(404, 'not found')
    const target = await splitPath(decodeURIComponent(url.pathname), signal)
    let stat
    try {
      stat = await fsys.stat(target.cid, { path: target.path || undefined, signal })
    } catch (e) {
      // kubo answers 404 for a missing path under an existing root.
      throw new HttpError(e.name === 'NotFoundError' ? 404 : 500, e.message)
    }
    if (stat.type === 'directory') throw new HttpError(501, 'directory listings are not served')
    await writeStream(res, fsys.cat(stat.cid, { signal }))
  } catch (e) {
    fail(res, e)
  }
})

await new Promise(resolve => api.listen(config.api_port, '127.0.0.1', resolve))
await new Promise(resolve => gateway.listen(config.gateway_port, '127.0.0.1', resolve))
console.log(`helia ${VERSION}: peer ${libp2p.peerId.toString()}`)
for (const a of libp2p.getMultiaddrs()) console.log(`swarm listening on ${a.toString()}`)
console.log(`RPC API listening on http://127.0.0.1:${config.api_port}`)
console.log(`Gateway listening on http://127.0.0.1:${config.gateway_port}`)

let stopping = false
async function shutdown () {
  if (stopping) return
  stopping = true
  api.close()
  gateway.close()
  api.closeAllConnections?.()
  gateway.closeAllConnections?.()
  try {
    await helia.stop()
    await blockstore.close()
    await datastore.close()
  } finally {
    process.exit(0)
  }
}
process.on('SIGTERM', shutdown)
process.on('SIGINT', shutdown)
