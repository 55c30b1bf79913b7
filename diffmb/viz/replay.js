// diffmb replay page: reads the scene JSON written by diffmb.viz.html and draws it with three.js
// (vendored, loaded from the page itself). World is z-up; quaternions arrive as w, x, y, z.
const api = {
  ready: false, error: null, bodyNames: [], nFrames: 0, nTracks: 0, times: [], frame: 0, time: 0,
  playing: false, speed: 1,
};
window.diffmbReplay = api;

function fail(msg) {
  api.error = String(msg);
  const el = document.getElementById('msg');
  el.textContent = 'This replay cannot be shown: ' + api.error;
  el.style.display = 'block';
}

function bytesOf(b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out.buffer;
}
const f32 = (b64) => new Float32Array(bytesOf(b64));
const u32 = (b64) => new Uint32Array(bytesOf(b64));

let THREE;
try {
  const code = document.getElementById('three-src').textContent;
  const url = URL.createObjectURL(new Blob([code], { type: 'text/javascript' }));
  THREE = await import(url);
  URL.revokeObjectURL(url);
} catch (e) {
  fail('the 3-D library did not load (' + e + ')');
}
if (THREE) {
  try {
    main();
  } catch (e) {
    fail(e && e.message ? e.message : e);
  }
}

function main() {
  const D = JSON.parse(document.getElementById('scene-data').textContent);
  const times = f32(D.times);
  const nf = times.length, nb = D.bodyNames.length;
  const tracks = D.tracks.map((t) => ({ ...t, poses: f32(t.poses) }));
  api.bodyNames = D.bodyNames.slice();
  api.nFrames = nf;
  api.nTracks = tracks.length;
  api.times = Array.from(times);
  document.title = D.title;
  document.getElementById('title').textContent = D.title;

  const view = document.getElementById('view');
  let renderer;
  try {
    renderer = new THREE.WebGLRenderer({ antialias: true, preserveDrawingBuffer: true });
  } catch (e) {
    fail('WebGL is not available in this browser (' + (e.message || e) + ')');
    return;
  }
  renderer.setPixelRatio(window.devicePixelRatio || 1);
  renderer.setSize(view.clientWidth, view.clientHeight);
  renderer.setClearColor(0xeef1f5, 1);
  view.appendChild(renderer.domElement);

  const scene = new THREE.Scene();
  const lo = new THREE.Vector3(...D.bounds[0]), hi = new THREE.Vector3(...D.bounds[1]);
  const diag = Math.max(lo.distanceTo(hi), 4 * D.extent, 1e-3);
  const camera = new THREE.PerspectiveCamera(40, view.clientWidth / view.clientHeight,
    diag / 1000, diag * 50);
  camera.up.set(0, 0, 1);
  scene.add(new THREE.HemisphereLight(0xffffff, 0x8a8070, 1.6));
  const sun = new THREE.DirectionalLight(0xffffff, 1.6);
  scene.add(sun);
  scene.add(sun.target);

  // ---- geometry ------------------------------------------------------------------------------
  function geometryOf(s) {
    const z = s.size;
    let g;
    switch (s.kind) {
      case 'box': return new THREE.BoxGeometry(2 * z[0], 2 * z[1], 2 * z[2]);
      case 'sphere': return new THREE.SphereGeometry(z[0], 24, 16);
      case 'ellipsoid':
        g = new THREE.SphereGeometry(1, 24, 16);
        g.scale(z[0], z[1], z[2]);
        return g;
      case 'capsule':
        g = new THREE.CapsuleGeometry(z[0], 2 * z[1], 8, 20);
        g.rotateX(Math.PI / 2); // three's axis is y; ours is z
        return g;
      case 'cylinder':
        g = new THREE.CylinderGeometry(z[0], z[0], 2 * z[1], 24);
        g.rotateX(Math.PI / 2);
        return g;
      case 'plane': {
        const span = 2 * Math.max(hi.x - lo.x, hi.y - lo.y, 4 * D.extent);
        return new THREE.PlaneGeometry(z[0] > 0 ? 2 * z[0] : span, z[1] > 0 ? 2 * z[1] : span);
      }
      case 'mesh': {
        g = new THREE.BufferGeometry();
        g.setAttribute('position', new THREE.BufferAttribute(f32(s.vertices), 3));
        g.setIndex(new THREE.BufferAttribute(u32(s.faces), 1));
        g.computeVertexNormals();
        return g;
      }
    }
    throw new Error('unknown shape kind ' + s.kind);
  }
  const geoms = D.shapes.map(geometryOf);

  function material(rgba, opacity, override) {
    const c = override ? override : rgba.slice(0, 3);
    const a = rgba[3] * opacity;
    return new THREE.MeshStandardMaterial({
      color: new THREE.Color(c[0], c[1], c[2]), roughness: 0.65, metalness: 0.05,
      transparent: a < 0.999, opacity: a, depthWrite: a >= 0.999, side: THREE.DoubleSide,
    });
  }
  function place(obj, s) {
    obj.position.set(s.pos[0], s.pos[1], s.pos[2]);
    obj.quaternion.set(s.quat[1], s.quat[2], s.quat[3], s.quat[0]);
  }

  // the world's own shapes (planes, static geoms)
  D.shapes.forEach((s, i) => {
    if (s.body >= 0) return;
    const m = new THREE.Mesh(geoms[i], material(s.rgba, 1, null));
    place(m, s);
    scene.add(m);
    if (s.kind === 'plane') addGrid(m);
  });
  function addGrid(parent) {
    const span = parent.geometry.parameters.width;
    const step = Math.pow(10, Math.floor(Math.log10(Math.max(span / 10, 1e-3))));
    const n = Math.min(Math.round(span / step), 400);
    const grid = new THREE.GridHelper(n * step, n, 0x666666, 0x999999);
    grid.rotateX(Math.PI / 2);
    grid.position.z = 1e-4 * diag;
    grid.material.transparent = true;
    grid.material.opacity = 0.35;
    parent.add(grid);
  }
  // terrain
  for (const t of D.terrain) {
    if (t.kind === 'plane') {
      const span = 2 * Math.max(hi.x - lo.x, hi.y - lo.y, 4 * D.extent);
      const m = new THREE.Mesh(new THREE.PlaneGeometry(span, span), material(t.rgba, 1, null));
      const n = new THREE.Vector3(...t.normal).normalize();
      m.quaternion.setFromUnitVectors(new THREE.Vector3(0, 0, 1), n);
      const c = new THREE.Vector3((lo.x + hi.x) / 2, (lo.y + hi.y) / 2, 0);
      c.addScaledVector(n, t.offset - c.dot(n)); // project the motion's centre onto the plane
      m.position.copy(c);
      scene.add(m);
      addGrid(m);
    } else if (t.kind === 'hfield') {
      const H = f32(t.heights), nx = t.shape[0], ny = t.shape[1];
      const pos = new Float32Array(nx * ny * 3);
      for (let i = 0; i < nx; i++) {
        for (let j = 0; j < ny; j++) {
          const k = (i * ny + j) * 3;
          pos[k] = t.origin[0] + i * t.spacing[0];
          pos[k + 1] = t.origin[1] + j * t.spacing[1];
          pos[k + 2] = H[i * ny + j];
        }
      }
      const idx = [];
      for (let i = 0; i + 1 < nx; i++) {
        for (let j = 0; j + 1 < ny; j++) {
          const a = i * ny + j, b = (i + 1) * ny + j, c = (i + 1) * ny + j + 1, d = i * ny + j + 1;
          idx.push(a, b, c, a, c, d);
        }
      }
      const g = new THREE.BufferGeometry();
      g.setAttribute('position', new THREE.BufferAttribute(pos, 3));
      g.setIndex(idx);
      g.computeVertexNormals();
      const m = new THREE.Mesh(g, material(t.rgba, 1, null));
      m.material.flatShading = false;
      scene.add(m);
    }
  }

  // bodies: one group per body per track, the body's shapes inside
  const groups = tracks.map((tr) => {
    const gs = [];
    for (let b = 0; b < nb; b++) {
      const g = new THREE.Group();
      g.name = D.bodyNames[b];
      scene.add(g);
      gs.push(g);
    }
    D.shapes.forEach((s, i) => {
      if (s.body < 0) return;
      const m = new THREE.Mesh(geoms[i], material(s.rgba, tr.opacity, tr.color));
      place(m, s);
      gs[s.body].add(m);
    });
    return gs;
  });
  const axes = groups[0].map((g) => {
    const a = new THREE.AxesHelper(0.6 * D.extent);
    a.visible = D.frames;
    a.material.depthTest = false;
    a.renderOrder = 10;
    g.add(a);
    return a;
  });

  // force layers: arrows (and contact points), scaled so the largest is ~1.5 extents
  const layers = D.forces.map((L) => {
    const P = f32(L.points), V = f32(L.vectors), n = L.n;
    let fmax = 0;
    for (let i = 0; i < V.length; i += 3) fmax = Math.max(fmax, Math.hypot(V[i], V[i + 1], V[i + 2]));
    const scale = fmax > 0 ? 1.5 * D.extent / fmax : 1;
    const color = new THREE.Color(...L.color);
    const arrows = [], dots = [];
    const dotGeom = new THREE.SphereGeometry(0.06 * D.extent, 10, 8);
    const dotMat = new THREE.MeshBasicMaterial({ color });
    for (let i = 0; i < n; i++) {
      const a = new THREE.ArrowHelper(new THREE.Vector3(0, 0, 1), new THREE.Vector3(), 1, color);
      a.visible = false;
      scene.add(a);
      arrows.push(a);
      if (L.show_points) {
        const d = new THREE.Mesh(dotGeom, dotMat);
        d.visible = false;
        scene.add(d);
        dots.push(d);
      }
    }
    return { P, V, n, scale, fmax, arrows, dots, label: L.label };
  });
  let showForces = true;

  // ---- camera: an orbit around a target, z up ---------------------------------------------------
  const orbit = {
    target: new THREE.Vector3().addVectors(lo, hi).multiplyScalar(0.5),
    distance: D.follow ? 8 * D.extent : 1.3 * diag, azimuth: -Math.PI / 3, elevation: 0.35,
  };
  let follow = D.follow;
  function placeCamera() {
    const ce = Math.cos(orbit.elevation);
    camera.position.set(
      orbit.target.x + orbit.distance * ce * Math.cos(orbit.azimuth),
      orbit.target.y + orbit.distance * ce * Math.sin(orbit.azimuth),
      orbit.target.z + orbit.distance * Math.sin(orbit.elevation));
    camera.lookAt(orbit.target);
    camera.updateMatrixWorld();
    sun.position.copy(camera.position).add(new THREE.Vector3(0, 0, diag));
    sun.target.position.copy(orbit.target);
  }
  const canvas = renderer.domElement;
  let drag = null;
  canvas.addEventListener('contextmenu', (e) => e.preventDefault());
  canvas.addEventListener('pointerdown', (e) => {
    drag = { x: e.clientX, y: e.clientY, pan: e.button === 2 || e.shiftKey };
    canvas.setPointerCapture(e.pointerId);
  });
  canvas.addEventListener('pointerup', () => { drag = null; });
  canvas.addEventListener('pointermove', (e) => {
    if (!drag) return;
    const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    drag.x = e.clientX;
    drag.y = e.clientY;
    if (drag.pan) {
      const k = orbit.distance / canvas.clientHeight;
      const right = new THREE.Vector3().setFromMatrixColumn(camera.matrixWorld, 0);
      const up = new THREE.Vector3().setFromMatrixColumn(camera.matrixWorld, 1);
      orbit.target.addScaledVector(right, -dx * k).addScaledVector(up, dy * k);
      follow = false;
      document.getElementById('follow').checked = false;
    } else {
      orbit.azimuth -= dx * 0.008;
      orbit.elevation = Math.min(1.55, Math.max(-1.55, orbit.elevation + dy * 0.008));
    }
    render();
  });
  canvas.addEventListener('wheel', (e) => {
    e.preventDefault();
    orbit.distance *= Math.exp(0.001 * e.deltaY);
    render();
  }, { passive: false });

  // ---- frames --------------------------------------------------------------------------------
  function pose(track, k, b) {
    const o = (k * nb + b) * 7, P = tracks[track].poses;
    return [P[o], P[o + 1], P[o + 2], P[o + 3], P[o + 4], P[o + 5], P[o + 6]];
  }
  function setFrame(k) {
    k = Math.max(0, Math.min(nf - 1, Math.round(Number(k)) || 0));
    api.frame = k;
    api.time = times[k];
    for (let t = 0; t < tracks.length; t++) {
      for (let b = 0; b < nb; b++) {
        const p = pose(t, k, b);
        groups[t][b].position.set(p[0], p[1], p[2]);
        groups[t][b].quaternion.set(p[4], p[5], p[6], p[3]);
      }
    }
    for (const L of layers) {
      for (let i = 0; i < L.n; i++) {
        const o = (k * L.n + i) * 3;
        const v = new THREE.Vector3(L.V[o], L.V[o + 1], L.V[o + 2]);
        const f = v.length();
        const on = showForces && f > 1e-6 * L.fmax && Number.isFinite(f);
        const a = L.arrows[i];
        a.visible = on;
        if (L.dots.length) L.dots[i].visible = on;
        if (!on) continue;
        a.position.set(L.P[o], L.P[o + 1], L.P[o + 2]);
        a.setDirection(v.clone().divideScalar(f));
        const len = Math.max(f * L.scale, 1e-4);
        a.setLength(len, Math.min(0.25 * len, 0.3 * D.extent), Math.min(0.12 * len, 0.15 * D.extent));
        if (L.dots.length) L.dots[i].position.copy(a.position);
      }
    }
    if (follow) {
      const p = pose(0, k, D.root);
      orbit.target.set(p[0], p[1], p[2]);
    }
    slider.value = String(k);
    label.textContent = 't = ' + times[k].toFixed(3) + ' s / ' + times[nf - 1].toFixed(3) + ' s';
    render();
    return k;
  }
  function frameAt(t) {
    let a = 0, b = nf - 1;
    if (t <= times[0]) return 0;
    if (t >= times[b]) return b;
    while (b - a > 1) {
      const m = (a + b) >> 1;
      if (times[m] <= t) a = m; else b = m;
    }
    return a;
  }
  function render() {
    placeCamera();
    renderer.render(scene, camera);
  }

  // ---- controls ------------------------------------------------------------------------------
  const slider = document.getElementById('slider');
  const label = document.getElementById('time');
  const playBtn = document.getElementById('play');
  slider.max = String(nf - 1);
  slider.addEventListener('input', () => { pause(); setFrame(Number(slider.value)); });
  let clock = 0;
  function play() {
    if (api.frame >= nf - 1) setFrame(0);
    api.playing = true;
    clock = performance.now();
    playBtn.textContent = 'Pause';
  }
  function pause() {
    api.playing = false;
    playBtn.textContent = 'Play';
  }
  playBtn.addEventListener('click', () => (api.playing ? pause() : play()));
  document.getElementById('speed').addEventListener('change', (e) => { api.speed = Number(e.target.value); });
  const framesBox = document.getElementById('frames');
  framesBox.checked = D.frames;
  framesBox.addEventListener('change', () => { axes.forEach((a) => { a.visible = framesBox.checked; }); render(); });
  const forcesBox = document.getElementById('forces');
  if (!layers.length) forcesBox.parentElement.style.display = 'none';
  forcesBox.addEventListener('change', () => { showForces = forcesBox.checked; setFrame(api.frame); });
  const followBox = document.getElementById('follow');
  followBox.checked = follow;
  followBox.addEventListener('change', () => { follow = followBox.checked; setFrame(api.frame); });
  window.addEventListener('keydown', (e) => {
    if (e.key === ' ') { e.preventDefault(); api.playing ? pause() : play(); }
    if (e.key === 'ArrowRight') { pause(); setFrame(api.frame + 1); }
    if (e.key === 'ArrowLeft') { pause(); setFrame(api.frame - 1); }
  });
  window.addEventListener('resize', () => {
    renderer.setSize(view.clientWidth, view.clientHeight);
    camera.aspect = view.clientWidth / view.clientHeight;
    camera.updateProjectionMatrix();
    render();
  });
  const legend = document.getElementById('legend');
  tracks.forEach((t) => {
    if (tracks.length < 2 && !D.forces.length) return;
    const c = t.color || [0.6, 0.6, 0.65];
    legend.insertAdjacentHTML('beforeend', '<div><span class="sw" style="background:rgb(' +
      c.map((x) => Math.round(255 * x)).join(',') + ');opacity:' + Math.max(t.opacity, 0.4) +
      '"></span></div>');
    legend.lastChild.appendChild(document.createTextNode(t.label));
  });
  layers.forEach((L, i) => {
    const c = D.forces[i].color;
    legend.insertAdjacentHTML('beforeend', '<div><span class="sw" style="background:rgb(' +
      c.map((x) => Math.round(255 * x)).join(',') + ')"></span></div>');
    legend.lastChild.appendChild(document.createTextNode(
      L.label + ' (longest arrow ' + L.fmax.toPrecision(3) + ' N)'));
  });
  const notes = document.getElementById('notes');
  D.notes.forEach((n) => { const d = document.createElement('div'); d.textContent = n; notes.appendChild(d); });

  function tick(now) {
    if (api.playing) {
      const t = times[api.frame] + (now - clock) / 1000 * api.speed;
      clock = now;
      if (t >= times[nf - 1]) { setFrame(nf - 1); pause(); } else {
        const k = frameAt(t);
        // keep fractional progress: only jump when the next frame's time is reached
        if (k !== api.frame) setFrame(k); else clock -= (t - times[api.frame]) * 1000 / api.speed;
      }
    }
    requestAnimationFrame(tick);
  }

  // ---- the page's API --------------------------------------------------------------------------
  api.setFrame = setFrame;
  api.setTime = (t) => setFrame(frameAt(Number(t)));
  api.play = play;
  api.pause = pause;
  api.render = render;
  api.bodyPoses = (k, track = 0) => {
    k = Math.max(0, Math.min(nf - 1, k | 0));
    const out = [];
    for (let b = 0; b < nb; b++) out.push(pose(track, k, b).slice(0, 3));
    return out;
  };
  api.bodyQuaternions = (k, track = 0) => {
    const out = [];
    for (let b = 0; b < nb; b++) out.push(pose(track, k | 0, b).slice(3));
    return out;
  };
  api.project = (x, y, z) => {
    camera.updateMatrixWorld();
    const v = new THREE.Vector3(x, y, z).project(camera);
    const r = canvas.getBoundingClientRect();
    return [r.left + (v.x + 1) / 2 * r.width, r.top + (1 - v.y) / 2 * r.height];
  };
  api.setView = (o) => {
    if (o.azimuth !== undefined) orbit.azimuth = o.azimuth;
    if (o.elevation !== undefined) orbit.elevation = o.elevation;
    if (o.distance !== undefined) orbit.distance = o.distance;
    if (o.target !== undefined) { orbit.target.set(...o.target); follow = false; followBox.checked = false; }
    if (o.follow !== undefined) { follow = !!o.follow; followBox.checked = follow; }
    setFrame(api.frame);
  };
  api.view = () => ({ azimuth: orbit.azimuth, elevation: orbit.elevation, distance: orbit.distance,
    target: orbit.target.toArray(), follow });

  setFrame(0);
  requestAnimationFrame(tick);
  api.ready = true;
}
