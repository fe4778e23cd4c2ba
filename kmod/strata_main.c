// SPDX-License-Identifier: GPL-2.0
/*
 * The Strata companion module: /dev/strata.
 *
 * The device is a misc device anyone may open (mode 0666): what a caller
 * may do is decided per ioctl (strata_ctl.c).  mmap gives the read-only
 * clock page at offset 0; kernel buffers have fds of their own
 * (STRATA_IOC_KBUF_OPEN, strata_kbuf.c).
 */
#define pr_fmt(fmt) "strata: " fmt

#include <linux/miscdevice.h>
#include <linux/module.h>

#include "strata_internal.h"
#include "strata_compat.h"

atomic_long_t strata_nr_objects = ATOMIC_LONG_INIT(0);

static int strata_open(struct inode *inode, struct file *file)
{
	file->private_data = NULL;
	return nonseekable_open(inode, file);
}

static int strata_release(struct inode *inode, struct file *file)
{
	strata_ctl_release(file);
	return 0;
}

static int strata_mmap(struct file *file, struct vm_area_struct *vma)
{
	/* Every mapping is read-only, and may never become writable. */
	if (vma->vm_flags & (VM_WRITE | VM_EXEC))
		return -EPERM;
	/* VM_MAYSHARE, not VM_SHARED: mmap clears VM_SHARED for a MAP_SHARED
	 * mapping of a file opened read-only (nothing could write through it),
	 * and an O_RDONLY open is what a clock reader does. */
	if (!(vma->vm_flags & VM_MAYSHARE))
		return -EINVAL;
	strata_vm_flags_clear(vma, VM_MAYWRITE | VM_MAYEXEC);
	if (vma->vm_pgoff)
		return -EINVAL;
	return strata_clock_mmap(vma);
}

static const struct file_operations strata_fops = {
	.owner = THIS_MODULE,
	.open = strata_open,
	.release = strata_release,
	.unlocked_ioctl = strata_ctl_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = strata_mmap,
	.llseek = no_llseek,
};

static struct miscdevice strata_miscdev = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "strata",
	.fops = &strata_fops,
	.mode = 0666,
};

static int __init strata_init(void)
{
	int ret;

	ret = strata_clock_init();
	if (ret)
		return ret;
	ret = strata_crash_init(strata_clock_page());
	if (ret)
		goto err_clock;
	ret = strata_kbuf_init();
	if (ret)
		goto err_crash;
	ret = strata_ctl_init();
	if (ret)
		goto err_kbuf;
	ret = misc_register(&strata_miscdev);
	if (ret)
		goto err_ctl;
	pr_info("loaded, kabi %u\n", STRATA_KABI_VERSION);
	return 0;

err_ctl:
	strata_ctl_exit();
err_kbuf:
	strata_kbuf_exit();
err_crash:
	strata_crash_exit();
err_clock:
	strata_clock_exit();
	return ret;
}

static void __exit strata_exit(void)
{
	long left;

	misc_deregister(&strata_miscdev);
	strata_ctl_exit();      /* clears the slots: disarms, frees buffers */
	strata_kbuf_exit();
	strata_crash_exit();
	strata_clock_exit();
	left = atomic_long_read(&strata_nr_objects);
	if (left)
		pr_err("leak: %ld objects not freed\n", left);
	else
		pr_info("unloaded, no object left\n");
}

module_init(strata_init);
module_exit(strata_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Strata tracing companion: rule control, clock page, kernel events");
