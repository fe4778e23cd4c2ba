/*
 * JvmApp - the JVM tests' program (check_jvm.py): Java API events with
 * every kind, two named threads contending for one monitor (JvmApp.Hot),
 * a wait with a timeout, System.gc() between two marks, then an end chosen
 * by the first argument: return, exit (System.exit), halt
 * (Runtime.halt) or kill (prints "ready" and waits for SIGKILL).
 * Prints "task TID COMM" for its threads while the workers are alive
 * (from /proc/self/task), and "steps=N".
 *
 * usage: java -cp strata.jar:. JvmApp MODE N
 */
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;
import org.strata.Strata;

public class JvmApp {
    static final class Hot {}
    static final Hot HOT = new Hot();

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        int n = Integer.parseInt(args[1]);
        Strata.Event step = Strata.declare("japp", "step", Strata.INFO,
                new String[] {"i", "big", "ratio", "flag", "what"},
                new Strata.Kind[] {Strata.Kind.INT, Strata.Kind.LONG, Strata.Kind.DOUBLE,
                        Strata.Kind.BOOLEAN, Strata.Kind.STRING});
        Strata.Event mark = Strata.declare("japp", "mark", Strata.INFO, new String[] {"what"},
                new Strata.Kind[] {Strata.Kind.STRING});
        for (int i = 0; i < n; i++)
            if (step.isEnabled())
                step.emit(i, (long) i * 1000000007L, i / 4.0, i % 2 == 0, "s" + (i % 3));

        CountDownLatch started = new CountDownLatch(2), listed = new CountDownLatch(1);
        Runnable work = () -> {
            started.countDown();
            try {
                listed.await();
                for (int k = 0; k < 20; k++)
                    synchronized (HOT) {
                        Thread.sleep(2); // held while the other one waits: contended
                    }
            } catch (InterruptedException e) {
                throw new RuntimeException(e);
            }
        };
        Thread w0 = new Thread(work, "worker-0"), w1 = new Thread(work, "worker-1");
        w0.start();
        w1.start();
        started.await();
        for (Path t : Files.newDirectoryStream(Path.of("/proc/self/task")))
            System.out.println("task " + t.getFileName() + " "
                    + Files.readString(t.resolve("comm")).trim());
        listed.countDown();
        w0.join();
        w1.join();
        synchronized (HOT) {
            HOT.wait(5); // times out: monitor_wait, monitor_waited(timed_out = 1)
        }
        mark.emit("before_gc");
        System.gc();
        mark.emit("after_gc");
        System.out.println("steps=" + n);
        System.out.flush();
        switch (mode) {
        case "exit": System.exit(0); break;
        case "halt": Runtime.getRuntime().halt(0); break;
        case "kill":
            System.out.println("ready pid=" + ProcessHandle.current().pid());
            System.out.flush();
            Thread.sleep(600000);
            break;
        default: break;
        }
    }
}
