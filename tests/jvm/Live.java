import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.concurrent.CountDownLatch;
import strata.Event;

/*
 * Live.java - a JVM that sessions start and stop under (check_live.py).
 * For each line "PHASE" on stdin (a, b or c) it emits N japp:live events
 * that its Java check says are enabled, and makes two threads contend for
 * the phase's own monitor (Live$MonA, Live$MonB, Live$MonC), then prints
 * "PHASE=EMITTED".  Ends at end of input.
 *
 * The thread map of threads older than the session: before reading input,
 * WORKERS threads ("live-worker-K") start and wait for the end; each, and
 * main, prints "thread=NAME:JAVA_TID:OS_TID" as /proc/thread-self says, then
 * "started".  Phase b first prints "live=NAME:JAVA_TID" for every live
 * thread Java lists (Thread.getAllStackTraces).
 */
public class Live {
    static final class MonA {}
    static final class MonB {}
    static final class MonC {}

    static final int WORKERS = 3;

    static void printThread() throws java.io.IOException {
        String self = Files.readSymbolicLink(Paths.get("/proc/thread-self")).toString();
        Thread t = Thread.currentThread();
        synchronized (System.out) {
            System.out.println("thread=" + t.getName() + ":" + t.getId() + ":" + self.substring(self.lastIndexOf('/') + 1));
        }
    }

    public static void main(String[] args) throws Exception {
        int n = Integer.parseInt(args[0]);
        printThread();
        CountDownLatch printed = new CountDownLatch(WORKERS), end = new CountDownLatch(1);
        Thread[] workers = new Thread[WORKERS];
        for (int k = 0; k < WORKERS; k++) {
            workers[k] = new Thread(() -> {
                try {
                    printThread();
                    printed.countDown();
                    end.await();
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            }, "live-worker-" + k);
            workers[k].start();
        }
        printed.await();
        System.out.println("started");
        System.out.flush();
        Event live = Event.declare("japp", "live", Event.INFO, Event.field("phase", Event.Type.STRING),
                Event.field("i", Event.Type.INT));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String phase; (phase = in.readLine()) != null;) {
            phase = phase.trim();
            Object mon = phase.equals("a") ? new MonA() : phase.equals("b") ? new MonB() : new MonC();
            if (phase.equals("b"))
                for (Thread x : Thread.getAllStackTraces().keySet())
                    System.out.println("live=" + x.getName() + ":" + x.getId());
            int emitted = 0;
            for (int i = 0; i < n; i++) {
                if (live.enabled()) {
                    live.record().putString(phase).putInt(i).emit();
                    emitted++;
                }
            }
            Thread[] t = new Thread[2];
            for (int k = 0; k < 2; k++) {
                t[k] = new Thread(() -> {
                    for (int r = 0; r < 10; r++) {
                        synchronized (mon) {
                            try {
                                Thread.sleep(2);
                            } catch (InterruptedException e) {
                                return;
                            }
                        }
                        Thread.yield();
                    }
                });
                t[k].start();
            }
            for (Thread x : t)
                x.join();
            System.out.println(phase + "=" + emitted);
            System.out.flush();
        }
        end.countDown();
        for (Thread w : workers)
            w.join();
    }
}
