// The sessions kept across a crash of the daemon (consumerd/persistence.h),
// in-process with a real session table and a fake host: what is kept (an
// active disk session, with its owner's pid; not a created one), when (a
// change saved once marked, at once or after the delay), what a second
// "daemon" on the same path takes up, and a restored session's owner
// exiting.  Re-attaching buffers is tested with real processes by
// tests/control/check_restart.py.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "event_loop.h"
#include "log.h"
#include "persistence.h"
#include "process_registry.h"
#include "session_table.h"
#include "temp_dir.h"

namespace strata {
namespace daemon_impl {
namespace {

struct FakeTableHost : SessionTable::Host {
	void settle() override {}
	void collect() override {}
	void forget_drains(const Session &) override {}
	void changed() override {}
	void adopt_early(Session &) override {}
	bool watch_triggers(bool on) override { return on; }
};

// What persistence asked of the daemon.
struct FakeHost : Persistence::Host {
	std::vector<std::pair<uint64_t, pid_t>> ended;
	pid_t conn_pid(uint64_t conn_id) override { return conn_id == 7 ? getpid() : 0; }
	void end_owned(uint64_t owner, pid_t peer) override { ended.push_back({owner, peer}); }
};

// One daemon's worth of the parts persistence works with.
struct Parts {
	explicit Parts(const std::string &sock)
	    : table(table_host, SessionTable::Config{sock, "testhost", 100}),
	      persist(host, loop, table, procs, Persistence::Config{sock, "testhost"})
	{
	}
	EventLoop loop;
	FakeTableHost table_host;
	FakeHost host;
	ProcessRegistry procs{[](int) { return true; }, [](int) {}};
	SessionTable table;
	Persistence persist;
};

class PersistenceTest : public ::testing::Test {
protected:
	void SetUp() override
	{
		g_quiet = true;
		ASSERT_TRUE(dir_.ok());
	}
	proto::Create create_msg(const std::string &name, uint32_t flags = 0) const
	{
		proto::Create m;
		m.session = name;
		m.output_dir = dir_.path() + "/out-" + name;
		m.flags = flags;
		return m;
	}
	std::string state_of(const std::string &name) const
	{
		std::ifstream f(sock_ + ".state/" + name + ".session");
		std::stringstream ss;
		ss << f.rdbuf();
		return ss.str();
	}
	bool kept(const std::string &name) const
	{
		struct stat st;
		return stat((sock_ + ".state/" + name + ".session").c_str(), &st) == 0;
	}

	strata_test::TempDir dir_{"persistence"};
	const std::string sock_ = dir_.path() + "/consumerd.sock";
	const Caller record_{geteuid(), getegid(), 7}; // `strata record`'s connection
};

TEST_F(PersistenceTest, AnActiveSessionIsKeptAndTakenUpByTheNextDaemon)
{
	{
		Parts a(sock_);
		a.persist.restore(); // nothing to take up
		EXPECT_TRUE(a.table.all().empty());
		ASSERT_EQ(a.table.create(record_, create_msg("rec", proto::kCreateOwned)).status, 0);
		ASSERT_EQ(a.table.create(record_, create_msg("idle")).status, 0);
		ASSERT_EQ(a.table.start(record_, "rec").status, 0);
		a.persist.save_if_changed(); // restore() left it changed: saved
		EXPECT_TRUE(kept("rec"));
		EXPECT_FALSE(kept("idle")) << "a created session is not kept";
		// A change nobody marked is not saved; marked, it is.
		proto::Rule r;
		r.pattern = "app:tick";
		ASSERT_EQ(a.table.rule(record_, "rec", r).status, 0);
		a.persist.save_if_changed();
		EXPECT_EQ(state_of("rec").find("app:tick"), std::string::npos);
		a.persist.changed();
		a.persist.save_if_changed();
		EXPECT_NE(state_of("rec").find("app:tick"), std::string::npos);
		EXPECT_TRUE(a.host.ended.empty());
	} // a crash: nothing ends the sessions
	Parts b(sock_);
	b.persist.restore();
	ASSERT_EQ(b.table.all().size(), 1u);
	const Session &s = *b.table.all()[0];
	EXPECT_EQ(s.name, "rec");
	EXPECT_EQ(s.state, proto::SessionState::Active);
	EXPECT_EQ(s.out, dir_.path() + "/out-rec");
	ASSERT_EQ(s.rules.size(), 1u);
	EXPECT_EQ(s.rules[0].pattern, "app:tick");
	// Owned by record's pid now (its connection died with the daemon),
	// which lives: nothing ended, the pid watched as a process.
	EXPECT_TRUE(b.host.ended.empty());
	EXPECT_NE(b.procs.find(getpid()), nullptr);
	// It exits: its session ends, by the pid's stand-in owner.
	b.persist.owner_exited(getpid());
	ASSERT_EQ(b.host.ended.size(), 1u);
	EXPECT_EQ(b.host.ended[0].first, s.owner_conn);
	EXPECT_EQ(b.host.ended[0].second, getpid());
}

TEST_F(PersistenceTest, AStoppedSessionIsNoLongerKept)
{
	Parts a(sock_);
	a.persist.restore();
	ASSERT_EQ(a.table.create(record_, create_msg("s")).status, 0);
	ASSERT_EQ(a.table.start(record_, "s").status, 0);
	a.persist.changed();
	a.persist.save();
	EXPECT_TRUE(kept("s"));
	ASSERT_EQ(a.table.stop(record_, "s").status, 0);
	a.persist.changed();
	a.persist.save_later(); // the loop's turn ends: saved 20 ms later
	EXPECT_TRUE(kept("s"));
	for (int i = 0; i < 50 && kept("s"); i++)
		ASSERT_EQ(a.loop.turn(100), 0);
	EXPECT_FALSE(kept("s"));
}

} // namespace
} // namespace daemon_impl
} // namespace strata
