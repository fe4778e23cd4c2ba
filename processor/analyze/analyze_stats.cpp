// analyze_stats.cpp - the report's figures: an operation's name, a
// percentile, and WaitDist (analyze_model.h).
#include <algorithm>
#include <cmath>

#include "analyze_model.h"

namespace strata {
namespace analyze {

bool op_from_name(const std::string &name, Op *op)
{
	static const std::map<std::string, Op> names = {
		{"mutex_lock", Op::MutexLock},
		{"mutex_timedlock", Op::MutexTimedlock},
		{"mutex_trylock", Op::MutexTrylock},
		{"mutex_unlock", Op::MutexUnlock},
		{"rwlock_rdlock", Op::RwRdlock},
		{"rwlock_wrlock", Op::RwWrlock},
		{"rwlock_tryrdlock", Op::RwTryrdlock},
		{"rwlock_trywrlock", Op::RwTrywrlock},
		{"rwlock_unlock", Op::RwUnlock},
		{"cond_wait", Op::CondWait},
		{"cond_timedwait", Op::CondTimedwait},
		{"cond_signal", Op::CondSignal},
		{"cond_broadcast", Op::CondBroadcast},
		{"sem_wait", Op::SemWait},
		{"sem_timedwait", Op::SemTimedwait},
		{"sem_trywait", Op::SemTrywait},
		{"sem_post", Op::SemPost},
	};
	auto it = names.find(name);
	if (it == names.end())
		return false;
	*op = it->second;
	return true;
}

uint64_t percentile(std::vector<uint64_t> v, double p)
{
	if (v.empty())
		return 0;
	size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
	if (rank < 1)
		rank = 1;
	if (rank > v.size())
		rank = v.size();
	std::nth_element(v.begin(), v.begin() + static_cast<long>(rank - 1), v.end());
	return v[rank - 1];
}

namespace {

// WaitDist's histogram: values below 256 exactly, then 128 buckets per
// power of two.
constexpr size_t kFine = 256 + 56 * 128;

size_t fine_index(uint64_t v)
{
	if (v < 256)
		return static_cast<size_t>(v);
	const int e = 63 - __builtin_clzll(v);
	return 256 + static_cast<size_t>(e - 8) * 128 + static_cast<size_t>((v >> (e - 7)) - 128);
}

uint64_t fine_upper(size_t i)
{
	if (i < 256)
		return i;
	const int e = static_cast<int>((i - 256) / 128) + 8;
	const uint64_t lo = (128 + (i - 256) % 128) << (e - 7);
	return lo + ((uint64_t(1) << (e - 7)) - 1);
}

} // namespace

void WaitDist::add(uint64_t v)
{
	n_++;
	max_ = std::max(max_, v);
	// The bucket: the bit length of the microseconds, at most the last.
	const uint64_t us = v / 1000;
	const int k = us ? std::min(64 - __builtin_clzll(us), kUsBuckets - 1) : 0;
	us_[k]++;
	if (!fine_.empty()) {
		fine_[fine_index(v)]++;
		return;
	}
	exact_.push_back(v);
	if (exact_.size() <= kExact)
		return;
	fine_.assign(kFine, 0);
	for (uint64_t x : exact_)
		fine_[fine_index(x)]++;
	std::vector<uint64_t>().swap(exact_);
}

uint64_t WaitDist::percentile(double p) const
{
	if (fine_.empty())
		return analyze::percentile(exact_, p);
	uint64_t rank = static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(n_)));
	rank = std::min(std::max<uint64_t>(rank, 1), n_);
	uint64_t seen = 0;
	for (size_t i = 0; i < kFine; i++) {
		seen += fine_[i];
		if (seen >= rank)
			return std::min(fine_upper(i), max_);
	}
	return max_;
}

} // namespace analyze
} // namespace strata
