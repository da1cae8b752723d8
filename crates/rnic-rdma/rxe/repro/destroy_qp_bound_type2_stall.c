/* ibv_destroy_qp of a QP that still has a type-2 window bound to it stalls for about 50 s:
 * the window holds a reference on the QP, and the kernel waits for it before it frees the QP
 * anyway. Reproduced when the destroy takes more than 10 s. */
#include "repro.h"

int main(void)
{
	struct dev d;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct pair p;
	double t0, took;
	int rc;

	repro_name = "destroy-qp-bound-type2-stall";
	d = open_dev();
	pd = ibv_alloc_pd(d.ctx);
	CHECK(pd, "ibv_alloc_pd");
	mr = new_mr(pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	p = connect_pair(&d, pd, pd);
	/* The window stays bound to the QP: that is what stalls its destruction. */
	(void)bound_type2(pd, p.resp, p.resp_cq, mr, 0, 64, IBV_ACCESS_REMOTE_READ);
	t0 = now_s();
	rc = ibv_destroy_qp(p.resp);
	took = now_s() - t0;
	if (took > 10)
		verdict(1, "ibv_destroy_qp took %.1f s (%s)", took, rc ? strerror(rc) : "ok");
	verdict(0, "ibv_destroy_qp took %.2f s", took);
}
