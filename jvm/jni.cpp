/*
 * jni.cpp - the native side of the Java API (org.strata.Strata, jvm/java/).
 *
 * Each Java event is a declared event (strata/dynamic.h).  Java reads its
 * state word through a direct ByteBuffer over the tracepoint's `state`
 * (an opaque VarHandle read: no JNI crossing to ask "enabled?"); emitting
 * an enabled event crosses JNI once, with the numbers in a long[] and the
 * strings in a String[].  Field kinds as Java sees them: INT (4 bytes),
 * LONG (8), DOUBLE (8-byte float, raw bits in the long[]), BOOLEAN (1
 * byte, 0 or 1), STRING.
 */
#include <errno.h>
#include <string.h>

#include <strata/dynamic.h>

#include "jvm_agent.h"

namespace {

// org.strata.Strata.Kind ordinals.
enum Kind { kInt, kLong, kDouble, kBoolean, kString };

void throw_iae(JNIEnv *env, const char *msg)
{
	jclass k = env->FindClass("java/lang/IllegalArgumentException");
	if (k)
		env->ThrowNew(k, msg);
}

} // namespace

extern "C" {

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM *, void *)
{
	return JNI_VERSION_1_8;
}

JNIEXPORT jlong JNICALL Java_org_strata_Strata_declare0(JNIEnv *env, jclass, jstring provider,
							 jstring name, jint level, jobjectArray names,
							 jintArray kinds)
{
	const jsize n = names ? env->GetArrayLength(names) : 0;
	if (!provider || !name || !kinds || env->GetArrayLength(kinds) != n)
		return -EINVAL;
	if (n > (jsize)64)
		return -E2BIG;
	jint k[64];
	env->GetIntArrayRegion(kinds, 0, n, k);
	strata_dyn_field f[64];
	const char *fname[64] = {nullptr};
	jstring fstr[64] = {nullptr};
	jlong rc = 0;
	for (jsize i = 0; i < n && rc == 0; i++) {
		fstr[i] = (jstring)env->GetObjectArrayElement(names, i);
		fname[i] = fstr[i] ? env->GetStringUTFChars(fstr[i], nullptr) : nullptr;
		memset(&f[i], 0, sizeof f[i]);
		f[i].name = fname[i];
		f[i].base = 10;
		switch (k[i]) {
		case kInt: f[i].kind = STRATA_FIELD_INTEGER, f[i].size = 4, f[i].is_signed = 1; break;
		case kLong: f[i].kind = STRATA_FIELD_INTEGER, f[i].size = 8, f[i].is_signed = 1; break;
		case kDouble: f[i].kind = STRATA_FIELD_FLOAT, f[i].size = 8, f[i].is_signed = 1; break;
		case kBoolean: f[i].kind = STRATA_FIELD_INTEGER, f[i].size = 1; break;
		case kString: f[i].kind = STRATA_FIELD_STRING; break;
		default: rc = -EINVAL;
		}
	}
	const char *p = env->GetStringUTFChars(provider, nullptr);
	const char *e = env->GetStringUTFChars(name, nullptr);
	strata_dyn_event *ev = nullptr;
	if (rc == 0)
		rc = strata_dyn_declare(p, e, level, f, (uint32_t)n, &ev);
	env->ReleaseStringUTFChars(provider, p);
	env->ReleaseStringUTFChars(name, e);
	for (jsize i = 0; i < n; i++)
		if (fstr[i]) {
			if (fname[i])
				env->ReleaseStringUTFChars(fstr[i], fname[i]);
			env->DeleteLocalRef(fstr[i]);
		}
	return rc < 0 ? rc : (jlong)(uintptr_t)ev;
}

JNIEXPORT jstring JNICALL Java_org_strata_Strata_error0(JNIEnv *env, jclass, jint code)
{
	return env->NewStringUTF(strata_dyn_strerror(code));
}

JNIEXPORT jobject JNICALL Java_org_strata_Strata_stateBuffer0(JNIEnv *env, jclass, jlong h)
{
	auto *ev = (strata_dyn_event *)(uintptr_t)h;
	return ev ? env->NewDirectByteBuffer(&ev->state, sizeof ev->state) : nullptr;
}

JNIEXPORT jlong JNICALL Java_org_strata_Strata_stateAddress0(JNIEnv *, jclass, jlong h)
{
	auto *ev = (strata_dyn_event *)(uintptr_t)h;
	return ev ? (jlong)(uintptr_t)&ev->state : 0;
}

JNIEXPORT void JNICALL Java_org_strata_Strata_emit0(JNIEnv *env, jclass, jlong h, jlongArray nums,
						      jobjectArray strs)
{
	auto *ev = (strata_dyn_event *)(uintptr_t)h;
	if (!ev || !strata_dyn_enabled(ev))
		return;
	const strata_event_desc *d = ev->desc;
	const uint32_t n = d->n_fields;
	if (n > 64 || !nums || env->GetArrayLength(nums) != (jsize)n) {
		throw_iae(env, "strata: the values do not match the event's fields");
		return;
	}
	jlong num[64];
	env->GetLongArrayRegion(nums, 0, (jsize)n, num);
	union strata_dyn_value v[64];
	jstring js[64];
	const char *cs[64];
	uint32_t n_str = 0;
	for (uint32_t i = 0; i < n; i++) {
		const strata_field_desc &f = d->fields[i];
		if (f.kind == STRATA_FIELD_STRING) {
			jstring s = strs ? (jstring)env->GetObjectArrayElement(strs, (jsize)i) : nullptr;
			const char *c = s ? env->GetStringUTFChars(s, nullptr) : nullptr;
			js[n_str] = s;
			cs[n_str++] = c;
			v[i].s = c;
		} else if (f.kind == STRATA_FIELD_FLOAT) {
			memcpy(&v[i].f, &num[i], sizeof v[i].f);
		} else {
			v[i].i = num[i];
		}
	}
	strata_dyn_emit(ev, v, n);
	for (uint32_t i = 0; i < n_str; i++)
		if (js[i]) {
			if (cs[i])
				env->ReleaseStringUTFChars(js[i], cs[i]);
			env->DeleteLocalRef(js[i]);
		}
}

JNIEXPORT void JNICALL Java_org_strata_Strata_release0(JNIEnv *, jclass, jlong h)
{
	strata_dyn_release((strata_dyn_event *)(uintptr_t)h);
}

} // extern "C"
