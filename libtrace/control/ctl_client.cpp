/*
 * ctl_client.cpp - see ctl_client.h.
 */
#include "ctl_client.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include "proto/sock.h"

namespace strata {

CtlClient::~CtlClient()
{
	if (fd_ >= 0)
		close(fd_);
}

int CtlClient::open(const std::string &path, std::string &err)
{
	if (fd_ >= 0) { // again (strata record after a daemon restart)
		close(fd_);
		fd_ = -1;
	}
	const char *t = getenv("STRATA_CTL_TIMEOUT_MS");
	if (t && *t && atoi(t) > 0)
		timeout_ms = atoi(t);
	std::vector<std::string> paths;
	if (path.empty())
		paths = proto::client_socket_paths();
	else
		paths.push_back(path);
	if (fd_ >= 0) { // a second open: to another daemon
		close(fd_);
		fd_ = -1;
	}
	int r = -ENOENT;
	if (paths.empty()) { // proto::server_path refused what it was given
		const char *env = getenv("STRATA_CONSUMERD_SOCKET");
		err = env && *env ? "STRATA_CONSUMERD_SOCKET is " + std::to_string(strlen(env)) +
					    " bytes long: a socket path is at most 107 bytes"
				  : "no socket path: set STRATA_CONSUMERD_SOCKET, or XDG_RUNTIME_DIR to a "
				    "shorter directory";
	}
	for (const std::string &p : paths) {
		r = proto::connect_unix(p, proto::now_ms() + timeout_ms);
		if (r == -ENOENT || r == -ECONNREFUSED) {
			err = "no strata-consumerd listens on " + p +
			      " (start one, or let 'strata record' start its own)";
			continue;
		}
		if (r == -ENAMETOOLONG) {
			err = "cannot connect to " + p +
			      ": a socket path is at most 107 bytes, this one is " + std::to_string(p.size());
			continue;
		}
		if (r < 0) {
			err = "cannot connect to " + p + ": " + strerror(-r);
			continue;
		}
		fd_ = r;
		path_ = p;
		proto::Hello h;
		h.role = static_cast<uint32_t>(proto::Role::Controller);
		h.client = "strata";
		proto::Message ans;
		r = call(h, ans, err);
		if (r == 0 && ans.type() != proto::Type::HelloReply) {
			err = ans.type() == proto::Type::Reply ? std::get<proto::Reply>(ans.body).text
							       : "unexpected answer to HELLO";
			r = -EPROTO;
		}
		if (r == 0) {
			version_ = std::get<proto::HelloReply>(ans.body).version;
			if (version_ < proto::kMinVersion || version_ > proto::kVersion) {
				err = "the daemon chose protocol version " + std::to_string(version_);
				r = -EPROTO;
			}
		}
		if (r == 0)
			return 0;
		err = p + ": " + err;
		close(fd_);
		fd_ = -1;
	}
	if (paths.size() > 1 && r == -ENOENT)
		err = "no strata-consumerd is running (tried " + paths[0] + " and " + paths[1] + ")";
	return r;
}

int CtlClient::call(proto::Body body, proto::Message &answer, std::string &err)
{
	if (fd_ < 0) {
		err = "not connected";
		return -ENOTCONN;
	}
	proto::Message m;
	m.seq = seq_++;
	m.body = std::move(body);
	m.version = version_;
	return proto::request(fd_, m, answer, proto::now_ms() + timeout_ms, err);
}

int CtlClient::command(proto::Body body, std::string &text)
{
	proto::Message ans;
	int r = call(std::move(body), ans, text);
	if (r < 0)
		return r;
	if (ans.type() != proto::Type::Reply) {
		text = "unexpected answer type " + std::to_string(static_cast<int>(ans.type()));
		return -EPROTO;
	}
	const proto::Reply &rep = std::get<proto::Reply>(ans.body);
	text = rep.text;
	return rep.status;
}

int CtlClient::command_fd(proto::Body body, std::string &text, int *fd)
{
	*fd = -1;
	if (fd_ < 0) {
		text = "not connected";
		return -ENOTCONN;
	}
	proto::Message m, ans;
	m.seq = seq_++;
	m.body = std::move(body);
	m.version = version_;
	const int64_t dl = proto::now_ms() + timeout_ms;
	int r = proto::send_message(fd_, m, -1, dl);
	if (r < 0) {
		text = std::string("send: ") + strerror(-r);
		return r;
	}
	r = proto::recv_message(fd_, ans, fd, dl, text);
	if (r == 0 && (ans.seq != m.seq || ans.type() != proto::Type::Reply)) {
		text = "unexpected answer";
		r = -EPROTO;
	}
	if (r < 0) {
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
		return r;
	}
	const proto::Reply &rep = std::get<proto::Reply>(ans.body);
	text = rep.text;
	if (rep.status != 0 && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	return rep.status;
}

} // namespace strata
