// Run a Node.js script (argv[2], e.g. js/helia-ipfs.mjs) that dies with the odf-node daemon.
//
// The daemon passes the read end of a pipe whose write end only it holds; its number is in
// ODF_LIFELINE_FD. Nothing is ever written: end-of-file means the daemon process is gone (even
// after SIGKILL), and this process kills itself at once, so the IPFS node never outlives the
// daemon that started it. The reasons for a pipe rather than PR_SET_PDEATHSIG are in
// engine/lifeline.py; node/lifeline.py is the daemon's side.
//
// The pipe is read through a net.Socket that is unref'ed: it must not keep the event loop
// alive, or an IPFS node that stopped on SIGTERM would never exit (the daemon then waited its
// 10 s and killed it on every shutdown).
import fs from 'node:fs'
import net from 'node:net'
import { pathToFileURL } from 'node:url'

const fd = Number.parseInt(process.env.ODF_LIFELINE_FD ?? '', 10)
delete process.env.ODF_LIFELINE_FD
if (Number.isInteger(fd) && fd > 2) {
  const lifeline = new net.Socket({ fd, readable: true, writable: false })
  const die = () => process.kill(process.pid, 'SIGKILL')
  lifeline.on('data', () => {})
  lifeline.on('end', die)
  lifeline.on('error', die)
  lifeline.unref()
}

const cli = fs.realpathSync(process.argv[2])
process.argv.splice(1, 2, cli)
await import(pathToFileURL(cli).href)
