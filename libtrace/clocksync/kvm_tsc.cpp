// kvm_tsc.cpp - KVM's TSC facts from debugfs; see kvm_tsc.h.
#include "kvm_tsc.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace strata {
namespace clocksync {
namespace {

// One decimal number alone on its line (debugfs prints "%lld\n" or "%llu\n").
bool read_number(const std::string &path, bool is_signed, int64_t *s, uint64_t *u, std::string *err)
{
	std::ifstream f(path);
	std::string text;
	if (!f || !std::getline(f, text)) {
		*err = "cannot read " + path;
		return false;
	}
	while (!text.empty() && (text.back() == ' ' || text.back() == '\r'))
		text.pop_back();
	const char *p = text.c_str();
	char *end = nullptr;
	errno = 0;
	if (is_signed)
		*s = strtoll(p, &end, 10);
	else if (*p != '-')
		*u = strtoull(p, &end, 10);
	if (text.empty() || !end || *end || errno) {
		*err = path + ": not a number: '" + text.substr(0, 40) + "'";
		return false;
	}
	return true;
}

} // namespace

std::string kvm_vm_dir(const std::string &kvm_root, long pid)
{
	DIR *d = opendir(kvm_root.c_str());
	if (!d)
		return "";
	const std::string prefix = std::to_string(pid) + "-";
	std::string found;
	while (dirent *e = readdir(d))
		if (std::string(e->d_name).rfind(prefix, 0) == 0) {
			found = kvm_root + "/" + e->d_name;
			break;
		}
	closedir(d);
	return found;
}

bool read_kvm_tsc(const std::string &vm_dir, std::vector<KvmTsc> *out, std::string *err)
{
	out->clear();
	DIR *d = opendir(vm_dir.c_str());
	if (!d) {
		*err = "cannot open " + vm_dir;
		return false;
	}
	std::vector<unsigned> vcpus;
	while (dirent *e = readdir(d)) {
		unsigned n;
		char tail;
		if (sscanf(e->d_name, "vcpu%u%c", &n, &tail) == 1 && n < 4096)
			vcpus.push_back(n);
	}
	closedir(d);
	std::sort(vcpus.begin(), vcpus.end());
	if (vcpus.empty()) {
		*err = vm_dir + ": no vcpuN folder";
		return false;
	}
	for (unsigned n : vcpus) {
		const std::string v = vm_dir + "/vcpu" + std::to_string(n) + "/";
		KvmTsc k;
		k.vcpu = n;
		uint64_t frac = 0;
		int64_t unused = 0;
		if (!read_number(v + "tsc-offset", true, &k.offset, nullptr, err) ||
		    !read_number(v + "tsc-scaling-ratio", false, &unused, &k.ratio, err) ||
		    !read_number(v + "tsc-scaling-ratio-frac-bits", false, &unused, &frac, err))
			return false;
		if (frac > 63 || k.ratio == 0) {
			*err = v + ": a scaling ratio of " + std::to_string(k.ratio) + " with " +
			       std::to_string(frac) + " fraction bits cannot be";
			return false;
		}
		k.frac_bits = static_cast<unsigned>(frac);
		out->push_back(k);
	}
	return true;
}

std::string kvm_vcpus_disagree(const std::vector<KvmTsc> &v)
{
	for (const KvmTsc &k : v)
		if (k.offset != v[0].offset || k.ratio != v[0].ratio || k.frac_bits != v[0].frac_bits) {
			char b[200];
			snprintf(b, sizeof b,
				 "vcpu%u's TSC (offset %" PRId64 ", ratio %" PRIu64
				 ") is not vcpu%u's (offset %" PRId64 ", ratio %" PRIu64
				 "): the guest has no one TSC",
				 k.vcpu, k.offset, k.ratio, v[0].vcpu, v[0].offset, v[0].ratio);
			return b;
		}
	return "";
}

uint64_t kvm_host_tsc(const KvmTsc &k, uint64_t guest_tsc)
{
	// guest = (host * ratio >> frac) + offset  =>  host = (guest - offset) << frac / ratio
	const unsigned __int128 scaled =
		static_cast<unsigned __int128>(guest_tsc - static_cast<uint64_t>(k.offset)) << k.frac_bits;
	return static_cast<uint64_t>(scaled / k.ratio);
}

std::string kvm_check(const Segment &s, const TscLine &guest_page, const KvmTsc &k, const TscLine &host_page,
		      int64_t slack_ns)
{
	if (!s.bounded || s.knots.empty())
		return "no bounded map to check KVM's facts against";
	for (const Knot &kn : s.knots) {
		// guest ns -> guest TSC (the guest's page inverted) -> host TSC (KVM) -> host ns.
		const double gcyc = static_cast<double>(kn.x - guest_page.ns0) / guest_page.ns_per_cycle;
		const uint64_t gtsc = guest_page.tsc0 + static_cast<uint64_t>(std::llround(gcyc));
		const uint64_t htsc = kvm_host_tsc(k, gtsc);
		const int64_t hns =
			host_page.ns0 +
			std::llround(static_cast<double>(static_cast<int64_t>(htsc - host_page.tsc0)) *
				     host_page.ns_per_cycle);
		if (hns < kn.lo - slack_ns || hns > kn.hi + slack_ns) {
			char b[300];
			snprintf(b, sizeof b,
				 "KVM's TSC offset and scaling put guest time %" PRId64
				 " at host time %" PRId64 ", where the exchanges allow only [%" PRId64
				 ", %" PRId64 "] (%+" PRId64 " ns beyond): the offset changed unseen (a TSC "
				 "write, a migration) or a clock page is off",
				 kn.x, hns, kn.lo - slack_ns, kn.hi + slack_ns,
				 hns < kn.lo - slack_ns ? hns - (kn.lo - slack_ns)
							: hns - (kn.hi + slack_ns));
			return b;
		}
	}
	return "";
}

} // namespace clocksync
} // namespace strata
