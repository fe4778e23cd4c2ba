import strata.Event;

/*
 * JvmBench.java - the Java side of bench/jvm/jvm_bench.py.
 *
 *   JvmBench strata N    N x Strata's Java API (name, int, int), checked with enabled()
 *   JvmBench lttng N     N x LTTng's Java interface, LTTngUst.tracepointIntInt (same shape)
 *   JvmBench monitor N   N rounds of two threads contending for one monitor (agent overhead)
 *
 * Prints "ns_per_op=X" (the best of 5 runs, after one warm-up run): the
 * thread's CPU time per event for strata and lttng (on a machine shared
 * with other work, wall time mostly measures the others), wall time per
 * round for monitor (two threads).
 */
public class JvmBench {
    static final Event EV = Event.declare("jbench", "int_int", Event.INFO, Event.field("name", Event.Type.STRING),
            Event.field("payload1", Event.Type.INT), Event.field("payload2", Event.Type.INT));
    static long sink;

    static void strata(long n) {
        for (long i = 0; i < n; i++) {
            if (EV.enabled())
                EV.record().putString("int_int").putInt((int) i).putInt(42).emit();
            else
                sink++;
        }
    }

    static void lttng(long n) {
        for (long i = 0; i < n; i++)
            org.lttng.ust.LTTngUst.tracepointIntInt("int_int", (int) i, 42);
    }

    static final Object LOCK = new Object();
    static long counter;

    static void monitor(long n) throws InterruptedException {
        Runnable r = () -> {
            for (long i = 0; i < n; i++) {
                synchronized (LOCK) {
                    counter++;
                }
            }
        };
        Thread a = new Thread(r), b = new Thread(r);
        a.start();
        b.start();
        a.join();
        b.join();
    }

    public static void main(String[] args) throws Exception {
        String what = args[0];
        long n = Long.parseLong(args[1]);
        if (what.equals("lttng"))
            org.lttng.ust.LTTngUst.init();
        java.lang.management.ThreadMXBean mx = java.lang.management.ManagementFactory.getThreadMXBean();
        boolean cpu = !what.equals("monitor");
        double best = Double.MAX_VALUE;
        for (int rep = 0; rep < 6; rep++) {
            long t0 = cpu ? mx.getCurrentThreadCpuTime() : System.nanoTime();
            switch (what) {
                case "strata": strata(n); break;
                case "lttng": lttng(n); break;
                default: monitor(n);
            }
            double ns = ((cpu ? mx.getCurrentThreadCpuTime() : System.nanoTime()) - t0) / (double) n;
            if (rep > 0)
                best = Math.min(best, ns);
        }
        System.out.printf("ns_per_op=%.3f%n", best);
    }
}
