// Package ordotls provides the TLS material of ordo processes: the
// certificate a node or client presents, the certificate authorities it
// trusts, and the *tls.Config values that use them for mutual TLS.
//
// Every configuration this package builds is TLS 1.3 only. A listener
// (Source.ServerConfig) presents its certificate and requires a client
// certificate that verifies against the trusted CAs; a caller
// (Source.ClientConfig) presents its certificate and verifies the
// server's against the same CAs and the name or IP address it dialed.
// Session tickets are off, so every connection is verified in full.
//
// Material comes from three places:
//
//   - Files and Load: PEM files (a CA bundle, a certificate chain, its
//     key) re-read when they change, checked at most once a second on a
//     handshake, so certificates and CAs are rotated without a restart.
//     A reload that fails (a missing file, a key that does not match its
//     certificate) keeps the last good material.
//   - NewMaterial: fixed material from PEM bytes.
//   - CA: a throw-away certificate authority for tests and demos, which
//     issues node and client certificates in memory or writes them to a
//     directory (ca.pem, ca-key.pem, <name>.pem, <name>-key.pem).
//
// A node certificate (CA.Issue) serves and calls: it is valid for server
// and client authentication and names the hosts its peers dial. A client
// certificate (CA.IssueClient) only calls. The certificate's subject
// common name is the identity a node sees its caller by.
//
// Rotating a CA without downtime: distribute a bundle of the old and the
// new CA to every process, then certificates issued by the new CA, then a
// bundle of the new CA alone. A process that sees the change keeps its
// established connections and uses the new material for new ones.
package ordotls
