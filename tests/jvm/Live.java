import java.io.BufferedReader;
import java.io.InputStreamReader;
import strata.Event;

/*
 * Live.java - a JVM that sessions start and stop under (check_live.py).
 * For each line "PHASE" on stdin (a, b or c) it emits N japp:live events
 * that its Java check says are enabled, and makes two threads contend for
 * the phase's own monitor (Live$MonA, Live$MonB, Live$MonC), then prints
 * "PHASE=EMITTED".  Ends at end of input.
 */
public class Live {
    static final class MonA {}
    static final class MonB {}
    static final class MonC {}

    public static void main(String[] args) throws Exception {
        int n = Integer.parseInt(args[0]);
        Event live = Event.declare("japp", "live", Event.INFO, Event.field("phase", Event.Type.STRING),
                Event.field("i", Event.Type.INT));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String phase; (phase = in.readLine()) != null;) {
            phase = phase.trim();
            Object mon = phase.equals("a") ? new MonA() : phase.equals("b") ? new MonB() : new MonC();
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
    }
}
