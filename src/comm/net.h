// Small TCP/IP helpers for the rendezvous across hosts: which local address reaches a peer,
// an interface's address, and blocking-with-deadline socket I/O for the TCP store.
#pragma once
#include <chrono>
#include <string>

namespace parity::comm::net {

using Deadline = std::chrono::steady_clock::time_point;

// The local address the kernel would use as source to reach host:port (a UDP socket is
// connected, nothing is sent): the address of the interface on the route to the master.
// Throws CommError when host does not resolve or no route leads there.
std::string route_source_address(const std::string& host, int port);

// The IPv4 (else IPv6) address of interface `iface`; ConfigError naming `var` if it has none.
std::string interface_address(const std::string& iface, const std::string& var);

// The first IPv4 address of an interface that is up and not loopback; "" when there is none.
std::string first_external_address();

// This process's network namespace ("net:[4026531840]"): processes that share it share
// loopback, whatever their host name says.
std::string netns_id();

// A listening TCP socket on host:port (port 0: any free port). host must be a local address;
// when it is not (a name that resolves elsewhere, a NAT address), the socket listens on every
// address of that family. Returns the fd; *bound gets the port. Throws CommError.
int listen_on(const std::string& host, int port, int* bound);

// A connected TCP socket to host:port, retried until `deadline` (the server may not listen
// yet). Throws CommError saying what the last attempt got ("Connection refused", ...).
int connect_to(const std::string& host, int port, Deadline deadline);

// Write / read exactly n bytes before the deadline; false on timeout, error or EOF
// (errno-like text in *why).
bool send_all(int fd, const void* data, size_t n, Deadline deadline, std::string* why);
bool recv_all(int fd, void* data, size_t n, Deadline deadline, std::string* why);

}  // namespace parity::comm::net
