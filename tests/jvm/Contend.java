import strata.Event;

/*
 * Contend.java - the Java program of tests/jvm: Java API events with exact
 * counts, two threads contending for one hot monitor (Contend$Hot), a
 * monitor wait with a timeout, System.gc(), then an end chosen by args[0]:
 * "return", "exit" (System.exit(3)), "halt" (Runtime.halt(4)) or "hang"
 * (prints "ready" and waits to be killed).  Prints "key=value" lines the
 * check compares with the trace.
 */
public class Contend {
    static final class Hot {}
    static final class Cold {}

    static final Object HOT = new Hot();
    static final Object COLD = new Cold();
    static volatile boolean holderIn;
    static final java.util.concurrent.CyclicBarrier START = new java.util.concurrent.CyclicBarrier(2);

    public static void main(String[] args) throws Exception {
        String end = args.length > 0 ? args[0] : "return";
        int n = args.length > 1 ? Integer.parseInt(args[1]) : 1000;
        int rounds = args.length > 2 ? Integer.parseInt(args[2]) : 20;
        Event step = Event.declare("japp", "step", Event.INFO,
                Event.field("i", Event.Type.INT), Event.field("big", Event.Type.LONG),
                Event.field("half", Event.Type.DOUBLE), Event.field("odd", Event.Type.BOOLEAN),
                Event.field("tag", Event.Type.STRING));
        Event mark = Event.declare("japp", "mark", Event.NOTICE, Event.field("what", Event.Type.STRING));
        long emitted = 0;
        for (int i = 0; i < n; i++) {
            if (step.enabled()) {
                step.record().putInt(i).putLong(1L << 40 | i).putDouble(i / 2.0).putBoolean((i & 1) != 0)
                        .putString(i % 3 == 0 ? "zero" : "é" + i).emit();
                emitted++;
            }
        }
        // Strings longer than the 16 KiB record: truncated, later fields intact.
        Event big = Event.declare("japp", "big", Event.INFO, Event.field("s", Event.Type.STRING),
                Event.field("after", Event.Type.INT), Event.field("s2", Event.Type.STRING),
                Event.field("z", Event.Type.LONG));
        if (big.enabled())
            big.record().putString("x".repeat(20000)).putInt(7).putString("y".repeat(20000)).putLong(9).emit();
        // A string stops at its first U+0000 (ASCII or not); null is "(null)".
        Event nul = Event.declare("japp", "nul", Event.INFO, Event.field("a", Event.Type.STRING),
                Event.field("b", Event.Type.STRING), Event.field("c", Event.Type.STRING),
                Event.field("n", Event.Type.BOOLEAN));
        if (nul.enabled())
            nul.record().putString("ab\0cd").putString("\u00e9\0x").putString(null).putBoolean(true).emit();
        System.out.println("pid=" + ProcessHandle.current().pid());
        printThread();
        System.out.println("step=" + emitted);

        // Contention on HOT: the holder sleeps inside it while the other thread enters.
        Thread a = new Thread(() -> contend(0, rounds), "contender-a");
        Thread b = new Thread(() -> contend(1, rounds), "contender-b");
        a.start();
        b.start();
        a.join();
        b.join();
        synchronized (COLD) {
            COLD.wait(5); // times out
        }
        if (mark.enabled())
            mark.record().putString("before_gc").emit();
        System.gc();
        if (mark.enabled())
            mark.record().putString("after_gc").emit();
        System.out.flush();
        switch (end) {
            case "exit":
                System.exit(3);
            case "halt":
                Runtime.getRuntime().halt(4);
            case "hang":
                System.out.println("ready");
                System.out.flush();
                Thread.sleep(600_000);
            default:
        }
    }

    // The thread map as /proc sees it: "thread=NAME:JAVA_TID:OS_TID".
    static void printThread() {
        try {
            String self = java.nio.file.Files.readSymbolicLink(java.nio.file.Paths.get("/proc/thread-self")).toString();
            Thread t = Thread.currentThread();
            synchronized (System.out) {
                System.out.println("thread=" + t.getName() + ":" + t.getId() + ":" + self.substring(self.lastIndexOf('/') + 1));
            }
        } catch (java.io.IOException e) {
            throw new RuntimeException(e);
        }
    }

    // Each round: enter HOT and hold it while sleeping, so the other thread
    // (which enters meanwhile) contends; after leaving, wait until the other
    // has taken HOT before entering again.  HotSpot's monitors let a thread
    // that just left take the monitor again ahead of a woken waiter: without
    // the hand-over one thread could run all its rounds while the other
    // stays blocked in a single contended enter (seen under load).
    static volatile int holder = -1;
    static final java.util.concurrent.atomic.AtomicInteger FINISHED = new java.util.concurrent.atomic.AtomicInteger();

    static void contend(int me, int rounds) {
        printThread();
        try { // both contenders start their rounds together
            START.await();
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
        for (int r = 0; r < rounds; r++) {
            synchronized (HOT) {
                holder = me;
                try {
                    Thread.sleep(2);
                } catch (InterruptedException e) {
                    return;
                }
            }
            // The hand-over: bounded (a second) in case the other is stuck.
            long until = System.nanoTime() + 1_000_000_000L;
            while (holder == me && FINISHED.get() == 0 && System.nanoTime() < until)
                Thread.yield();
        }
        FINISHED.incrementAndGet();
    }
}
