package strata;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * The arguments of one emission of an Event, written in field order into a
 * per-thread direct buffer that the native side decodes (java_api.cpp): one
 * JNI call per emitted event.  Not shared between threads.
 *
 * Encoding: INT, LONG and BOOLEAN as 8-byte native-order integers, DOUBLE as
 * an 8-byte double, STRING as a 4-byte byte count (-1: null), the UTF-8
 * bytes and a NUL.  A string that does not fit the buffer is truncated.
 */
public final class Record {
    static final int SIZE = 16384;

    private final Event event;
    private final ByteBuffer buf;
    private final long address; // of buf, for the natives (0 without them)
    private int field;

    Record(Event event) {
        this.event = event;
        ByteBuffer b = Event.NATIVE ? Event.buffer0(SIZE) : null;
        this.buf = (b != null ? b : ByteBuffer.allocateDirect(SIZE)).order(ByteOrder.nativeOrder());
        this.address = b != null ? Event.address0(b) : 0;
    }

    void reset() {
        buf.clear();
        field = 0;
    }

    private void expect(Event.Type t) {
        if (field >= event.types.length || event.types[field] != t)
            throw new IllegalStateException(event + ": field " + field + " is not " + t);
        field++;
    }

    private Record integer(Event.Type t, long v) {
        expect(t);
        buf.putLong(v);
        return this;
    }

    public Record putInt(int v) {
        return integer(Event.Type.INT, v);
    }

    public Record putLong(long v) {
        return integer(Event.Type.LONG, v);
    }

    public Record putBoolean(boolean v) {
        return integer(Event.Type.BOOLEAN, v ? 1 : 0);
    }

    public Record putDouble(double v) {
        expect(Event.Type.DOUBLE);
        buf.putDouble(v);
        return this;
    }

    public Record putString(String s) {
        expect(Event.Type.STRING);
        if (s == null) {
            buf.putInt(-1);
            return this;
        }
        int at = buf.position();
        buf.putInt(0);
        int room = buf.remaining() - 1 - 64; // leave room for later fields
        int n = 0;
        for (int i = 0; i < s.length() && n < room; i++) {
            char c = s.charAt(i);
            if (c < 0x80) {
                buf.put((byte) c);
                n++;
            } else { // the rare non-ASCII string: encode the rest at once
                byte[] rest = s.substring(i).getBytes(java.nio.charset.StandardCharsets.UTF_8);
                int k = Math.min(rest.length, room - n);
                while (k > 0 && k < rest.length && (rest[k] & 0xC0) == 0x80)
                    k--; // do not cut a character
                buf.put(rest, 0, Math.max(k, 0));
                n += Math.max(k, 0);
                break;
            }
        }
        buf.put((byte) 0);
        buf.putInt(at, n);
        return this;
    }

    /** Records the event (if a session still enables it); every field must be set. */
    public void emit() {
        if (field != event.types.length)
            throw new IllegalStateException(event + ": " + field + " of " + event.types.length + " fields set");
        if (event.handle != 0 && address != 0)
            Event.emit0(event.handle, address, buf.position());
    }
}
